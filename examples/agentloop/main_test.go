package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/apitest"
	"github.com/sandboxd/sandboxd/runner"
)

func TestAgentLoop(t *testing.T) {
	s := apitest.New(t, nil)
	// The fake engine plays Python: it counts the words it is given.
	s.Engine.Handle = func(spec *runner.Spec) runner.Result {
		return runner.Result{Status: runner.StatusOK, Stdout: []byte(fmt.Sprintf("%d words\n", len(strings.Fields(string(spec.Job.Stdin)))))}
	}
	c, err := client.New(s.URL, apitest.AgentKey)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var log bytes.Buffer
	a := &agent{c: c, session: "loop-test"}
	answer, err := a.run(ctx, stubPlanner{page: s.PageURL("/page"), profile: "pages"}, &log)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(answer, "The page has ") || !strings.HasSuffix(answer, "words") {
		t.Fatalf("answer %q\n%s", answer, log.String())
	}
	runs := s.Engine.Runs()
	if len(runs) != 1 || !strings.Contains(string(runs[0].Job.Stdin), "untrusted-content") || !strings.Contains(string(runs[0].Job.Stdin), "42 seconds") {
		t.Fatalf("the code did not get the fetched page as its input: %d runs", len(runs))
	}
	rep, err := c.SessionUsage(ctx, "", "loop-test")
	if err != nil || rep.Used.Execs != 1 || rep.Used.FetchBytes == 0 {
		t.Fatalf("session usage: %+v %v", rep, err)
	}

	// A page the profile denies ends the loop with the refusal.
	answer, err = a.run(ctx, stubPlanner{page: "http://169.254.169.254/latest/", profile: "pages"}, &log)
	if err != nil || !strings.Contains(answer, "EGRESS_DENIED") {
		t.Fatalf("denied page: %q %v", answer, err)
	}
}
