"use strict";
// The status page: polls /v1/status every two seconds and draws it. No
// libraries; every number is also written as text, so nothing depends on
// colour.
(function () {
  const $ = (id) => document.getElementById(id);
  let token = sessionStorage.getItem("floodgate-token") || "";
  let lastPolicies = "";

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    for (const c of children) e.append(c);
    return e;
  }
  function svgEl(tag, attrs) {
    const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    return e;
  }
  const fmt = (n) => Number(n).toLocaleString("en");
  const pct = (r) => (100 * r).toFixed(1) + " %";

  async function api(method, path, body) {
    const headers = token ? { Authorization: "Bearer " + token } : {};
    const init = { method, headers, cache: "no-store" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const resp = await fetch(path, init);
    if (resp.status === 401) {
      $("token").hidden = false;
      throw new Error("the admin listener needs its token (enter it above)");
    }
    const answer = await resp.json();
    if (!resp.ok) throw new Error(answer.error || resp.statusText);
    return answer;
  }

  // chart draws the points on a fixed axis of the last `slots` steps, the
  // newest at the right, so the time scale does not change as points come.
  function chart(p, step, slots) {
    const pts = p.points || [];
    const w = 300, h = 80, dx = w / Math.max(1, slots - 1);
    const peak = Math.max(1, ...pts.map((x) => Math.max(x.allowed, x.denied)));
    const line = (f) => pts.map((x, i) =>
      (w - (pts.length - 1 - i) * dx).toFixed(1) + "," + (h - (f(x) / peak) * (h - 4)).toFixed(1)).join(" ");
    const last = pts.length ? pts[pts.length - 1] : { allowed: 0, denied: 0 };
    const span = `the last ${Math.round(slots * step / 60)} min`;
    const svg = svgEl("svg", { viewBox: `0 0 ${w} ${h}`, role: "img",
      "aria-label": `${p.name}: decisions per ${step} s over ${span}; peak ${peak}; latest ${last.allowed} allowed, ${last.denied} denied` });
    svg.append(svgEl("line", { x1: 0, y1: h, x2: w, y2: h, stroke: "#999" }));
    svg.append(svgEl("polyline", { points: line((x) => x.allowed), fill: "none", class: "allowed", "stroke-width": 1.5 }));
    svg.append(svgEl("polyline", { points: line((x) => x.denied), fill: "none", class: "denied", "stroke-width": 1.5 }));
    const legend = el("p", { class: "legend" },
      `Solid line: allowed; dashed line: denied. Decisions per ${step} s over ${span}, now at the right; peak ${fmt(peak)}.`);
    return [svg, legend];
  }

  function keyTable(caption, unit, rows) {
    const t = el("table", {}, el("caption", {}, caption));
    t.append(el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "Key"),
      el("th", { scope: "col", class: "n" }, unit), el("th", { scope: "col", class: "n" }, "± at most"))));
    const tb = el("tbody");
    if (!rows || rows.length === 0) {
      tb.append(el("tr", {}, el("td", { colspan: 3 }, "none in the window")));
    }
    for (const r of rows || []) {
      const key = el("td", {}, r.key);
      if (r.recent && r.recent.length) {
        const d = el("details", { class: "recent" }, el("summary", {}, r.key));
        d.append(decisions(r.recent));
        key.replaceChildren(d);
      }
      tb.append(el("tr", {}, key, el("td", { class: "n" }, fmt(r.count)), el("td", { class: "n" }, fmt(r.error))));
    }
    t.append(tb);
    return el("div", { class: "table" }, t);
  }

  // decisions lists a key's last decisions, newest first.
  function decisions(list) {
    const ol = el("ol", { class: "decisions", reversed: "" });
    for (const d of list.slice().reverse()) {
      ol.append(el("li", {}, `${new Date(d.at).toLocaleTimeString()}: ${d.allowed ? "allowed" : "DENIED"}` +
        (d.route ? ` on route ${d.route}` : "") + `, cost ${d.cost}, ${d.remaining} left under ${d.limit || "no limit"}, by ${d.source}`));
    }
    return ol;
  }
  function decisionText(list) {
    return list.slice().reverse().map((d) => `  ${new Date(d.at).toLocaleTimeString()} ${d.allowed ? "allowed" : "DENIED "}` +
      (d.route ? ` route ${d.route}` : "") + ` cost ${d.cost} remaining ${d.remaining} under ${d.limit || "-"} by ${d.source}`).join("\n");
  }

  function policy(p, s) {
    const sec = el("section", { class: "policy", "aria-labelledby": "p-" + p.name, "data-policy": p.name });
    sec.append(el("h2", { id: "p-" + p.name }, "Policy " + p.name));
    const lm = p.last_minute;
    const dl = el("dl");
    const row = (k, v, cls) => { dl.append(el("dt", {}, k)); dl.append(el("dd", cls ? { class: cls } : {}, v)); };
    if (p.limits) row("Limits", p.limits.join(", "));
    if (p.overrides) row("Overrides", p.overrides.map((o) => `${o.key}: ${o.limits.join(", ")}`).join("; "));
    if (p.runtime_overrides) row("Runtime overrides", p.runtime_overrides.map((o) =>
      `${o.tier ? "tier " + o.tier : o.key}: ${o.limits ? o.limits.join(", ") : "×" + o.multiplier} until ` +
      `${new Date(o.expires).toLocaleString()}` + (o.by ? `, by ${o.by}` : "") + (o.reason ? ` (${o.reason})` : "")).join("; "));
    row("Last minute", `${fmt(lm.allowed)} allowed, ${fmt(lm.denied)} denied` + (lm.errors ? `, ${fmt(lm.errors)} errors` : ""));
    row("Decisions/s", `${(lm.allowed / 60).toFixed(1)} allowed, ${(lm.denied / 60).toFixed(1)} denied`);
    row("Denial ratio", pct(p.denial_ratio), p.denial_ratio > 0.1 ? "bad" : "");
    row("Since start", `${fmt(p.total.allowed)} allowed, ${fmt(p.total.denied)} denied`);
    const src = Object.entries(p.sources || {});
    const n = src.reduce((a, [, v]) => a + v, 0);
    if (n) row("Decided by", src.map(([k, v]) => `${k} ${pct(v / n)}`).join(", "));
    sec.append(el("div", { class: "grid" }, dl, el("div", {}, ...chart(p, s.step_seconds, s.history))));
    const win = Math.round(s.window_seconds);
    sec.append(el("div", { class: "grid" },
      keyTable(`Top limited keys (denied requests, last ${win} s or more)`, "Denied", p.top_limited),
      keyTable(`Top consuming keys (units allowed, last ${win} s or more)`, "Units", p.top_consuming)));
    return sec;
  }

  function render(s) {
    const when = new Date(s.time).toLocaleTimeString();
    $("updated").textContent = `Updated ${when}. Keys are ${s.raw_keys ? "shown as they are" : "redacted"}.`;
    const c = s.config, cdl = $("config-dl");
    cdl.replaceChildren();
    const crow = (k, v, cls) => { cdl.append(el("dt", {}, k)); cdl.append(el("dd", cls ? { class: cls } : {}, v)); };
    crow("Version", (c.version || "").slice(0, 12) + (c.file ? ` (${c.file})` : ""));
    if (c.loaded_at) crow("Loaded", new Date(c.loaded_at).toLocaleString());
    if (c.last_reload) {
      const r = c.last_reload;
      crow("Last reload", (r.ok ? "OK: accepted" : "FAILED: rejected, the previous configuration keeps serving") +
        " at " + new Date(r.at).toLocaleTimeString(), r.ok ? "" : "bad");
      if (r.error) crow("Error", r.error, "bad");
    }
    const e = s.engine;
    $("engine").hidden = !e;
    if (e) {
      const edl = $("engine-dl");
      edl.replaceChildren();
      const erow = (k, v, cls) => { edl.append(el("dt", {}, k)); edl.append(el("dd", cls ? { class: cls } : {}, v)); };
      erow("Engine", e.name);
      if (e.failure) erow("When Redis fails", {
        "fail-open": "fail-open: requests are allowed unlimited",
        "fail-closed": "fail-closed: requests are refused (503)",
        "local-fallback": "local-fallback: each instance decides alone with the same limits",
      }[e.failure] || e.failure);
      if (e.breaker) erow("Breaker", e.breaker === "closed" ? "closed (calls go to Redis)" : e.breaker.toUpperCase() + " (Redis is not called)", e.breaker === "closed" ? "" : "bad");
      const rt = e.round_trip;
      if (rt) erow("Redis round trip", rt.samples ? `p50 ${rt.p50_ms.toFixed(2)} ms, p99 ${rt.p99_ms.toFixed(2)} ms (${rt.samples} pings` +
        (rt.failed ? `, ${rt.failed} failed` : "") + ")" : "no ping yet", rt.error ? "bad" : "");
      if (rt && rt.error) erow("Redis", "FAILING: " + rt.error, "bad");
      else if (rt && rt.last_error) erow("Redis", `answering again; last failure at ${new Date(rt.last_error_at).toLocaleTimeString()}: ${rt.last_error}`);
      const ul = $("transitions");
      ul.replaceChildren();
      for (const t of e.transitions || []) {
        ul.append(el("li", {}, `${new Date(t.at).toLocaleTimeString()}: ${t.from} → ${t.to}` + (t.count > 1 ? ` (${t.count} times)` : "")));
      }
    }
    $("policies").replaceChildren(...s.policies.map((p) => policy(p, s)));
    const names = s.policies.map((p) => p.name).join(",");
    if (names !== lastPolicies) {
      lastPolicies = names;
      const sel = $("key-policy"), keep = sel.value;
      sel.replaceChildren(...s.policies.map((p) => el("option", { value: p.name }, p.name)));
      if (keep) sel.value = keep;
    }
  }

  async function poll() {
    try {
      render(await api("GET", "/v1/status"));
    } catch (err) {
      $("updated").textContent = "Not updated: " + err.message;
    }
  }

  $("token").addEventListener("submit", (ev) => {
    ev.preventDefault();
    token = $("token-input").value;
    sessionStorage.setItem("floodgate-token", token);
    $("token").hidden = true;
    poll();
  });
  $("key-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const reset = ev.submitter && ev.submitter.value === "reset";
    const q = new URLSearchParams({ policy: $("key-policy").value, key: $("key-key").value });
    const out = $("key-result");
    try {
      const k = await api(reset ? "DELETE" : "GET", "/v1/keys?" + q);
      out.textContent = (k.reset ? "Reset. " : "") + `${k.policy} / ${k.key} (${k.redacted}): ` +
        (k.limited ? "LIMITED, the next request is denied" : "not limited") +
        `; remaining ${k.remaining} under ${k.limit || "no limit"}; full again in ${k.reset_after_seconds.toFixed(1)} s` +
        (k.limits ? `; limits ${k.limits.join(", ")}` : "") + (k.limit_set ? ` (${k.limit_set})` : "") +
        (k.recent ? "\nLast decisions, newest first:\n" + decisionText(k.recent) : "");
    } catch (err) {
      out.textContent = "Error: " + err.message;
    }
  });

  // The explain box: what a front end would do with a described request.
  function describe() {
    const front = $("ex-front").value, peer = $("ex-peer").value.trim();
    if (front === "postgres") return { postgres: { user: $("ex-user").value, peer } };
    if (front === "envoy") {
      const descriptors = $("ex-descriptors").value.split("\n").map((l) => l.trim()).filter((l) => l).map((l) =>
        l.split(",").map((kv) => { const i = kv.indexOf("="); return { key: kv.slice(0, i < 0 ? kv.length : i).trim(), value: i < 0 ? "" : kv.slice(i + 1).trim() }; }));
      return { envoy: { domain: $("ex-domain").value.trim(), descriptors } };
    }
    const headers = {};
    for (const line of $("ex-headers").value.split("\n")) {
      const i = line.indexOf(":");
      if (i > 0) (headers[line.slice(0, i).trim()] ||= []).push(line.slice(i + 1).trim());
    }
    return { http: { method: $("ex-method").value.trim() || "GET", url: $("ex-url").value.trim() || "/", host: $("ex-host").value.trim(), headers, peer } };
  }
  function explanationText(x) {
    const lines = [];
    if (x.redirect) lines.push(`redirect: 308 to ${x.redirect}`);
    for (const r of x.routes || []) lines.push(`${r.matched ? "MATCH  " : "no     "} ${r.name}` + (r.match ? ` [${r.match}]` : "") + (r.why ? `: ${r.why}` : "") + (r.shadow ? " (shadow)" : ""));
    for (const c of x.checks) {
      lines.push(`check: ${c.where}: policy ${c.policy || "-"} key ${JSON.stringify(c.key || "")} cost ${c.cost}` + (c.shadow ? " (shadow)" : ""));
      if (c.skip) lines.push(`  skipped: ${c.skip}`);
      if (c.error) lines.push(`  the engine did not answer: ${c.error}`);
      const k = c.state;
      if (k) {
        lines.push(`  ${k.limited ? "LIMITED: this request would be denied" : "not limited"}; remaining ${k.remaining} under ${k.limit || "no limit"}; limits ${(k.limits || []).join(", ")}` +
          (k.limit_set ? ` (${k.limit_set})` : " (the policy's defaults)") + `; full again in ${k.reset_after_seconds.toFixed(1)} s`);
        if (k.recent) lines.push(decisionText(k.recent));
      }
    }
    for (const n of x.notes || []) lines.push("note: " + n);
    return lines.join("\n");
  }
  $("ex-front").addEventListener("change", () => {
    for (const f of ["http", "postgres", "envoy"]) $("ex-" + f + "-fields").hidden = $("ex-front").value !== f;
  });
  $("explain-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const out = $("explain-result");
    try {
      out.textContent = explanationText(await api("POST", "/v1/explain", describe()));
    } catch (err) {
      out.textContent = "Error: " + err.message;
    }
  });
  poll();
  setInterval(poll, 2000);
})();
