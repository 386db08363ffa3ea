package examples_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/memstore"
)

// Login brute-force protection in three layers on one endpoint:
//
//   - every attempt, per address: 20 a minute, against one address spraying
//     many accounts;
//   - failed attempts per address and account: 5 in 15 minutes, the usual
//     lockout, which never locks out the owner on another address;
//   - failed attempts per account from anywhere: 50 an hour, against guesses
//     spread over many addresses. It lets an attacker lock an account for
//     everyone, so keep it well above what a forgetful user reaches.
//
// Failed-only rules charge every attempt before the handler runs and refund
// the ones that succeed, so concurrent guesses cannot overrun the limit and
// a user who logs in is never counted. An attempt refused by one rule is
// refunded by the others: the attacker's refused guesses below do not use
// up its per-address allowance.
func Example_loginBruteForce() {
	clock := floodgatetest.NewClock(floodgatetest.Start)
	store := memstore.New(memstore.Options{Clock: clock})
	defer store.Close()
	policy := func(name string, l floodgate.Limit) floodgate.Limiter {
		lim, err := floodgate.New(store, floodgate.Policy{Name: name, Limits: []floodgate.Limit{l}})
		if err != nil {
			panic(err)
		}
		return lim
	}
	ip := httplimit.KeyByIP(nil) // clients reach this server directly
	account := httplimit.KeyByFormValue("username")
	mw, err := httplimit.New(httplimit.Config{Rules: []httplimit.Rule{
		{Limiter: policy("login-ip", floodgate.PerMinute(20)), Key: ip},
		{Limiter: policy("login-fail", floodgate.Limit{Rate: 5, Period: 15 * time.Minute}),
			Key: httplimit.JoinKeys(ip, account), Count: httplimit.CountFailed},
		{Limiter: policy("login-fail-account", floodgate.PerHour(50)),
			Key: account, Count: httplimit.CountFailed},
	}})
	if err != nil {
		panic(err)
	}
	passwords := map[string]string{"alice": "correct horse", "bob": "battery staple"}
	login := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user := strings.ToLower(r.PostFormValue("username"))
		if pw, ok := passwords[user]; !ok || r.PostFormValue("password") != pw {
			http.Error(w, "wrong username or password", http.StatusUnauthorized)
			return
		}
		io.WriteString(w, "welcome\n")
	}))

	try := func(addr, user, password string) int {
		form := url.Values{"username": {user}, "password": {password}}
		req := httptest.NewRequest("POST", "/login", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.RemoteAddr = addr + ":40000"
		rec := httptest.NewRecorder()
		login.ServeHTTP(rec, req)
		return rec.Code
	}
	const attacker, home = "203.0.113.66", "198.51.100.7"

	for range 5 {
		try(home, "alice", "correct horse")
	}
	fmt.Println("alice logs in 5 times:", try(home, "alice", "correct horse"))

	codes := []int{}
	for range 6 {
		codes = append(codes, try(attacker, "alice", "123456"))
	}
	fmt.Println("attacker guesses alice's password:", codes)
	fmt.Println("attacker with the right password:", try(attacker, "Alice", "correct horse"))
	fmt.Println("alice at home:", try(home, "alice", "correct horse"))

	codes = codes[:0]
	for _, u := range []string{"bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory",
		"niaj", "olivia", "peggy", "rupert", "sybil", "trent"} {
		codes = append(codes, try(attacker, u, "123456"))
	}
	fmt.Println("attacker sprays other accounts:", codes)

	clock.Advance(15 * time.Minute)
	fmt.Println("15 minutes later, attacker on bob:", try(attacker, "bob", "123456"))
	// Output:
	// alice logs in 5 times: 200
	// attacker guesses alice's password: [401 401 401 401 401 429]
	// attacker with the right password: 429
	// alice at home: 200
	// attacker sprays other accounts: [401 401 401 401 401 401 401 401 401 401 401 401 401 401 401 429]
	// 15 minutes later, attacker on bob: 401
}
