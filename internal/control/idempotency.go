package control

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/store"
)

// Idempotency headers.
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderReplayed       = "Idempotent-Replayed"
)

// idemPoll is how often a request waiting for an in-flight key looks at
// the store, besides being woken when this process finishes a key.
const idemPoll = 250 * time.Millisecond

// IdemCall is a keyed request on its way through idempotency: its tenant,
// key, request fingerprint and the id (exec or fetch) it runs under.
type IdemCall struct {
	Kind    string // "exec" or "fetch", for messages
	Tenant  string
	Key     string
	ReqHash string
	ID      string
	Log     *slog.Logger
}

// Idempotent serves a request with an Idempotency-Key: the first request
// with the key runs; a later one with the same request gets the stored
// answer (Idempotent-Replayed: true) without running anything, or waits
// for the first to finish, or is refused.
func (p *Plane) Idempotent(ctx context.Context, ic *IdemCall, run func() *Answer) *Answer {
	deadline := time.NewTimer(p.cfg.IdempotencyWait)
	defer deadline.Stop()
	for {
		woken := p.idemWaitChan() // before the read, so no wake-up is lost
		now := time.Now()
		rec, claimed, err := p.cfg.Store.ClaimIdempotency(ctx, &store.IdemRecord{
			Tenant: ic.Tenant, Key: ic.Key, RequestSHA256: ic.ReqHash, ExecID: ic.ID, Owner: p.cfg.Owner,
			CreatedAt: now, ExpiresAt: now.Add(p.cfg.IdempotencyTTL)})
		if err != nil {
			if ctx.Err() != nil {
				return ErrAnswer(Unavailable("the request ended before its Idempotency-Key was checked"))
			}
			ic.Log.Error("idempotency store failed", "err", err)
			e := Unavailable("the idempotency store failed, so the request was not run; retry after the Retry-After seconds with the same Idempotency-Key")
			e.RetryAfter = stateRetryAfter
			return ErrAnswer(e)
		}
		if claimed {
			a := run()
			p.finishClaim(ic, a)
			return a
		}
		if rec.RequestSHA256 != ic.ReqHash {
			return ErrAnswer(p.Refusal(&api.Error{Status: http.StatusUnprocessableEntity, Code: api.CodeIdempotencyMismatch, Field: HeaderIdempotencyKey,
				Message: fmt.Sprintf("this Idempotency-Key was first used at %s with a different request (endpoint, body, or X-Session-Id); a key names one request: send a new key for a new request", rec.CreatedAt.Format(time.RFC3339))}))
		}
		switch rec.State {
		case store.IdemDone:
			return p.replay(ic, rec)
		case store.IdemInterrupted:
			effect := "the code may have run in part or in full, and it is not run again. Check for its effects"
			if ic.Kind == "fetch" {
				effect = "the page may have been requested, and it is not requested again"
			}
			return ErrAnswer(p.Refusal(&api.Error{Status: http.StatusConflict, Code: api.CodeInterrupted,
				Message: fmt.Sprintf("the first request with this Idempotency-Key (%s %s, %s) was in flight when sandboxd stopped; %s; to run it again, send a new Idempotency-Key", ic.Kind, rec.ExecID, rec.CreatedAt.Format(time.RFC3339), effect)}))
		}
		// In flight: wait for it, bounded.
		poll := time.NewTimer(idemPoll)
		select {
		case <-woken:
		case <-poll.C:
		case <-deadline.C:
			poll.Stop()
			return ErrAnswer(p.Refusal(&api.Error{Status: http.StatusConflict, Code: api.CodeInProgress, RetryAfter: 1,
				Message: fmt.Sprintf("the first request with this Idempotency-Key (%s %s) is still running after %s; retry with the same key to get its result", ic.Kind, rec.ExecID, p.cfg.IdempotencyWait)}))
		case <-ctx.Done():
			poll.Stop()
			return ErrAnswer(Unavailable("the request ended while waiting for the first request with its Idempotency-Key"))
		}
		poll.Stop()
	}
}

// finishClaim stores a keyed call's answer, or releases the key when the
// call was refused before anything ran.
func (p *Plane) finishClaim(ic *IdemCall, a *Answer) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	defer p.idemNotify()
	if !a.Keep {
		if err := p.cfg.Store.ReleaseIdempotency(ctx, ic.Tenant, ic.Key, p.cfg.Owner); err != nil {
			ic.Log.Error("releasing an idempotency key failed; retries wait for it and then get 409 IN_PROGRESS until a restart", "err", err)
		}
		return
	}
	if err := p.cfg.Store.CompleteIdempotency(ctx, ic.Tenant, ic.Key, a.Status, a.Body); err != nil {
		// The store may be back soon (a database restarting): keep trying
		// in the background, so that retries get the answer rather than
		// IN_PROGRESS.
		ic.Log.Error("storing an idempotent answer failed; trying again in the background (retries get 409 IN_PROGRESS meanwhile)", "err", err)
		go p.completeLater(ic, a)
	}
}

// completeLater stores a keyed call's answer, retrying for a while.
func (p *Plane) completeLater(ic *IdemCall, a *Answer) {
	wait := 500 * time.Millisecond
	deadline := time.Now().Add(completeRetryFor)
	for time.Now().Before(deadline) {
		time.Sleep(wait)
		wait = min(wait*2, 10*time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := p.cfg.Store.CompleteIdempotency(ctx, ic.Tenant, ic.Key, a.Status, a.Body)
		cancel()
		if err == nil {
			ic.Log.Info("stored the idempotent answer on a later try")
			p.idemNotify()
			return
		}
	}
	ic.Log.Error("gave up storing an idempotent answer; retries get 409 IN_PROGRESS until the key expires or this process stops (then INTERRUPTED)")
}

// completeRetryFor bounds completeLater.
const completeRetryFor = 5 * time.Minute

// replay is the stored answer, marked replayed.
func (p *Plane) replay(ic *IdemCall, rec *store.IdemRecord) *Answer {
	p.cfg.Metrics.IdempotentReplays.Inc()
	ic.Log.Info("idempotent replay", "first_id", rec.ExecID, "status", rec.Status)
	a := &Answer{Status: rec.Status, Body: rec.Body}
	a.SetHeader(HeaderReplayed, "true")
	if rec.Status == http.StatusAccepted {
		var st api.ExecState
		if json.Unmarshal(rec.Body, &st) == nil && st.ID != "" {
			a.SetHeader("Location", "/exec/"+st.ID)
		}
	}
	var body struct {
		Status string     `json:"status"`
		Error  *api.Error `json:"error"`
	}
	if json.Unmarshal(rec.Body, &body) == nil {
		if body.Error != nil {
			a.Code = body.Error.Code
		} else {
			a.RunStatus = body.Status
		}
	}
	return a
}

// idemNotify wakes requests waiting on an idempotency record.
func (p *Plane) idemNotify() {
	p.mu.Lock()
	close(p.idemChanged)
	p.idemChanged = make(chan struct{})
	p.mu.Unlock()
}

func (p *Plane) idemWaitChan() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.idemChanged
}

// ShortHash names a key in logs without logging the key.
func ShortHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:8])
}
