package redact

import (
	"context"
	"fmt"
	"log/slog"
)

// handler redacts records before passing them to the wrapped handler.
type handler struct {
	h slog.Handler
	r *Redactor
}

// NewHandler wraps h so that the message and every string attribute value
// are redacted, in nested groups too. error and fmt.Stringer values (and
// LogValuer results) are rendered as strings and redacted; any other value
// is rendered with fmt and replaced by the redacted text only when that text
// holds a secret, so clean values keep their type.
func NewHandler(h slog.Handler, r *Redactor) slog.Handler {
	if r == nil {
		r = Default()
	}
	return &handler{h: h, r: r}
}

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.h.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, rec slog.Record) error {
	msg, _ := h.r.String(rec.Message)
	out := slog.NewRecord(rec.Time, rec.Level, msg, rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.h.Handle(ctx, out)
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(as))
	for i, a := range as {
		red[i] = h.attr(a)
	}
	return &handler{h: h.h.WithAttrs(red), r: h.r}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{h: h.h.WithGroup(name), r: h.r}
}

func (h *handler) attr(a slog.Attr) slog.Attr {
	return slog.Attr{Key: a.Key, Value: h.value(a.Value)}
}

func (h *handler) value(v slog.Value) slog.Value {
	v = v.Resolve()
	switch v.Kind() {
	case slog.KindString:
		s, c := h.r.String(v.String())
		if c == nil {
			return v
		}
		return slog.StringValue(s)
	case slog.KindGroup:
		as := v.Group()
		red := make([]slog.Attr, len(as))
		for i, a := range as {
			red[i] = h.attr(a)
		}
		return slog.GroupValue(red...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			s, _ := h.r.String(x.Error())
			return slog.StringValue(s)
		case fmt.Stringer:
			s, _ := h.r.String(x.String())
			return slog.StringValue(s)
		case []byte:
			s, _ := h.r.String(string(x))
			return slog.StringValue(s)
		default:
			s, c := h.r.String(fmt.Sprintf("%+v", x))
			if c == nil {
				return v
			}
			return slog.StringValue(s)
		}
	}
	return v
}
