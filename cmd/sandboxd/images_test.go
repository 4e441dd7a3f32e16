package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sandboxd/sandboxd/profiles"
)

type imagesEngine struct {
	present map[string]bool
	warmed  int
}

func (e *imagesEngine) ImageID(_ context.Context, ref string) (string, error) {
	if e.present[ref] {
		return "sha256:" + ref, nil
	}
	return "", errors.New("sandbox image is not present: " + ref)
}

func (e *imagesEngine) Warm(context.Context, *profiles.Set) { e.warmed++ }

// The watcher logs an image that goes missing once, logs and warms when it
// appears, and says nothing while nothing changes.
func TestImageWatcher(t *testing.T) {
	set, err := profiles.Load("../../profiles")
	if err != nil {
		t.Fatal(err)
	}
	current := &atomic.Pointer[profiles.Set]{}
	current.Store(set)
	const data = "sandboxd/python-data:3.11"
	eng := &imagesEngine{present: map[string]bool{"sandboxd/python:3.11": true}}
	var buf bytes.Buffer
	w := &imageWatcher{eng: eng, current: current, log: slog.New(slog.NewJSONHandler(&buf, nil)), present: map[string]bool{}}
	ctx := context.Background()

	w.look(ctx)
	w.look(ctx)
	if got := strings.Count(buf.String(), "image missing"); got != 1 {
		t.Fatalf("a missing image is logged %d times over two looks, want once:\n%s", got, buf.String())
	}
	if !strings.Contains(buf.String(), `"profiles":"data"`) || strings.Contains(buf.String(), "python:3.11\"") {
		t.Errorf("the log names the wrong image or profiles:\n%s", buf.String())
	}
	if eng.warmed != 0 {
		t.Errorf("warmed %d times before anything appeared", eng.warmed)
	}

	buf.Reset()
	eng.present[data] = true
	w.look(ctx)
	w.look(ctx)
	if got := strings.Count(buf.String(), "image available"); got != 1 || eng.warmed != 1 {
		t.Fatalf("an image that appears: logged %d times, warmed %d times; want 1 and 1:\n%s", got, eng.warmed, buf.String())
	}

	buf.Reset()
	delete(eng.present, data)
	w.look(ctx)
	if !strings.Contains(buf.String(), "image missing") || !strings.Contains(buf.String(), data) {
		t.Errorf("an image deleted while sandboxd runs is not logged:\n%s", buf.String())
	}
}
