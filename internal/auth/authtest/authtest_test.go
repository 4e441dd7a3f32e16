package authtest

import "testing"

func TestKeyring(t *testing.T) {
	ring := Keyring(t, "keys:\n  - {id: agent-1, tenant: acme, key: sbx_test_0123456789abcdef, roles: [agent]}\n")
	k, ok := ring.Authenticate("sbx_test_0123456789abcdef")
	if !ok || k.ID != "agent-1" || k.Tenant != "acme" || !k.Has("agent") {
		t.Fatalf("Authenticate: %+v %v", k, ok)
	}
	if _, ok := ring.Authenticate("sbx_test_other"); ok {
		t.Fatal("an unknown key authenticates")
	}
}
