package daemon

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/config"
)

// TestRestartListNamesEveryEnvoyField: docs/daemon.md's paragraph on what
// needs a restart names every envoy.* field a reload refuses (Reloadable
// is the list), itself or a section of it, so the list stays whole as
// fields are added.
func TestRestartListNamesEveryEnvoyField(t *testing.T) {
	doc, err := os.ReadFile("../docs/daemon.md")
	if err != nil {
		t.Fatal(err)
	}
	const start = "Anything else needs a restart"
	text := string(doc)
	i := strings.Index(text, start)
	if i < 0 {
		t.Fatalf("docs/daemon.md has no paragraph starting %q", start)
	}
	para, _, _ := strings.Cut(text[i:], "\n\n")
	var all []string
	fieldPaths(reflect.TypeFor[config.Config](), "", &all)
	n := 0
	for _, p := range all {
		if !strings.HasPrefix(p, "envoy.") || reloadable(p) {
			continue
		}
		n++
		named := false
		for q := p; q != "envoy"; q = q[:strings.LastIndexByte(q, '.')] {
			named = named || strings.Contains(para, "`"+q+"`")
		}
		if !named {
			t.Errorf("a reload refuses %s, but docs/daemon.md's restart list does not name it (or its section)", p)
		}
	}
	if n == 0 {
		t.Fatal("found no envoy field a reload refuses")
	}
}
