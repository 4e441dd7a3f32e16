package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/internal/auth"
)

// egressRoutes registers the profile endpoints, for security teams:
//
//	GET  /profiles                  exec and egress profiles with versions
//	GET  /profiles/{name}           one profile, of either kind (the body says which)
//	POST /profiles/{name}/evaluate  the decision an egress profile makes on a URL
func (s *Server) egressRoutes(e *echo.Echo) {
	sec := s.authenticate(auth.RoleSecurity)
	e.GET("/profiles", s.listProfiles, sec)
	e.GET("/profiles/:name", s.getProfile, sec)
	e.POST("/profiles/:name/evaluate", s.evaluateProfile, sec)
}

func (s *Server) listProfiles(c echo.Context) error {
	set := s.profiles()
	out := api.ProfileList{Exec: []api.ProfileSummary{}, Egress: []api.ProfileSummary{}}
	for _, name := range set.Names() {
		p := set.Exec[name]
		out.Exec = append(out.Exec, api.ProfileSummary{Name: name, Version: p.Version, Description: p.Description, Egress: p.Egress, Source: p.Source})
	}
	for _, name := range set.EgressNames() {
		p := set.Egress[name]
		out.Egress = append(out.Egress, api.ProfileSummary{Name: name, Version: p.Version, Description: p.Description, Mode: string(p.Mode), Source: p.Source})
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Server) getProfile(c echo.Context) error {
	name := c.Param("name")
	set := s.profiles()
	out := api.ProfileDetail{Name: name, Kinds: []string{}}
	if p, ok := set.Exec[name]; ok {
		out.Kinds = append(out.Kinds, "exec")
		out.Exec = yamlView(reflect.ValueOf(p).Elem()).(map[string]any)
		out.Exec["version"], out.Exec["source"] = p.Version, p.Source
	}
	if p, ok := set.Egress[name]; ok {
		out.Kinds = append(out.Kinds, "egress")
		out.Egress = yamlView(reflect.ValueOf(p).Elem()).(map[string]any)
		out.Egress["version"], out.Egress["source"] = p.Version, p.Source
	}
	if len(out.Kinds) == 0 {
		return &api.Error{Status: http.StatusNotFound, Code: api.CodeNotFound, Field: "name",
			Message: fmt.Sprintf("no exec or egress profile is named %q; exec profiles: %s; egress profiles: %s", name, strings.Join(set.Names(), ", "), strings.Join(set.EgressNames(), ", "))}
	}
	return c.JSON(http.StatusOK, out)
}

// evaluateTimeout bounds the lookup an evaluation may do.
const evaluateTimeout = 10 * time.Second

func (s *Server) evaluateProfile(c echo.Context) error {
	name := c.Param("name")
	set := s.profiles()
	p, ok := set.Egress[name]
	if !ok {
		msg := fmt.Sprintf("no egress profile is named %q; egress profiles: %s", name, strings.Join(set.EgressNames(), ", "))
		if _, isExec := set.Exec[name]; isExec {
			msg = fmt.Sprintf("%q is an exec profile; evaluate takes an egress profile: %s", name, strings.Join(set.EgressNames(), ", "))
		}
		return &api.Error{Status: http.StatusNotFound, Code: api.CodeNotFound, Field: "name", Message: msg}
	}
	var body api.EvaluateRequest
	if err := decodeJSON(c, 64<<10, &body); err != nil {
		return err
	}
	if body.URL == "" {
		return api.Validation("url", "url is required: an absolute http or https URL such as https://example.com/, or host:port with method CONNECT")
	}
	if body.Method == "" {
		body.Method = http.MethodGet
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), evaluateTimeout)
	defer cancel()
	// Approvals read-only: a dry run shows what an approval allows and
	// files no approval request. Self is /fetch's record of
	// sandboxd's own listeners, so the dry run refuses them as /fetch does.
	checker := &egress.Checker{Resolver: s.cfg.Resolver, Approvals: s.approvals.ReadOnly(), Self: s.self}
	ev := checker.Evaluate(ctx, p, egress.Request{Method: body.Method, Target: body.URL, Client: "evaluate"})
	if ev.Code.BadRequest() {
		field := "url"
		if ev.Code == egress.CodeBadMethod {
			field = "method"
		}
		return api.Validation(field, "%s cannot be evaluated: %s", field, ev.Reason)
	}
	return c.JSON(http.StatusOK, EvaluationBody(&ev, p))
}

// EvaluationBody is the answer of POST /profiles/{name}/evaluate for an
// evaluation under p; `sandboxd profiles evaluate --json` prints it too.
func EvaluationBody(ev *egress.Evaluation, p *egress.Profile) api.EvaluateResponse {
	out := api.EvaluateResponse{
		Decision: ev.Verdict(), Reason: ev.Reason, Rule: ev.Rule, Code: string(ev.Code), WouldDeny: ev.WouldDeny, ApprovalID: ev.ApprovalID,
		Addresses: []string{}, Host: ev.Host, Port: int(ev.Port), Method: ev.Method,
		Profile:      api.EvaluateProfile{Name: p.Name, Version: p.Version, Mode: string(p.Mode)},
		AddressCheck: api.EvaluateAddressCheck{Status: ev.Address.Status, Code: string(ev.Address.Code), Reason: ev.Address.Reason},
		Overall:      ev.Overall, Summary: ev.Summary(),
	}
	if ev.RulesChecked {
		r := ev.Rules
		out.Rules = &api.EvaluateRules{Verdict: r.Verdict(), Code: string(r.Code), Rule: r.Rule, Pattern: r.Pattern, Reason: r.Reason}
	}
	for _, a := range ev.Addresses {
		out.Addresses = append(out.Addresses, a.String())
	}
	if ev.Dial.IsValid() {
		out.Dial = ev.Dial.String()
	}
	return out
}

// yamlView renders a profile value under its YAML keys, so that the API
// shows what the file says: nested structs and lists follow, durations
// are written as in YAML ("5s"), fields tagged "-" are left out.
func yamlView(v reflect.Value) any {
	if v.Type() == reflect.TypeFor[time.Duration]() {
		return time.Duration(v.Int()).String()
	}
	switch v.Kind() {
	case reflect.Struct:
		out := map[string]any{}
		for i := 0; i < v.NumField(); i++ {
			f := v.Type().Field(i)
			tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if tag == "" || tag == "-" || !f.IsExported() {
				continue
			}
			out[tag] = yamlView(v.Field(i))
		}
		return out
	case reflect.Slice:
		out := make([]any, 0, v.Len())
		for i := 0; i < v.Len(); i++ {
			out = append(out, yamlView(v.Index(i)))
		}
		return out
	case reflect.String:
		return v.String()
	case reflect.Int, reflect.Int64:
		return v.Int()
	case reflect.Float64:
		return v.Float()
	case reflect.Bool:
		return v.Bool()
	}
	return fmt.Sprint(v.Interface())
}
