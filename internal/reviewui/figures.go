package reviewui

import (
	"bytes"
	"errors"
	"fmt"
	"image/png"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
)

// Figures: a session call's figures (result.N parts whose content type
// is image/png) and a rendered fetch's screenshot are shown as images,
// served by the page itself. The bytes came from the sandbox or a page
// and are hostile: each is decoded with image/png and encoded again
// before it is sent, so what goes out is a PNG the page made (no trailing
// bytes, no other chunks), as image/png with nosniff and a sandboxing
// Content-Security-Policy, never the upload itself.

const (
	// maxFigureBytes is the most of a figure part that is decoded.
	maxFigureBytes = 16 << 20
	// maxFigurePixels bounds a figure's width times height, so that a
	// small part cannot claim a huge image.
	maxFigurePixels = 40_000_000
)

// figurePart are the parts served as figures.
var figurePart = regexp.MustCompile(`^(result\.[0-9]{1,4}|screenshot)$`)

func figureURL(id, name string) string {
	return Prefix + "captures/" + url.PathEscape(id) + "/figure?" + url.Values{"name": {name}}.Encode()
}

// checkPNGConfig reads a PNG's header: its size, or why it is not shown.
func checkPNGConfig(b []byte) (w, h int, err error) {
	if len(b) > maxFigureBytes {
		return 0, 0, fmt.Errorf("the figure is %s, over the %s the page shows", sizeOf(int64(len(b))), sizeOf(maxFigureBytes))
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		return 0, 0, errors.New("the figure is not a PNG image: not shown (its bytes are in the capture)")
	}
	if cfg.Width <= 0 || cfg.Height <= 0 || int64(cfg.Width)*int64(cfg.Height) > maxFigurePixels {
		return 0, 0, fmt.Errorf("the figure claims %d×%d pixels: not shown", cfg.Width, cfg.Height)
	}
	return cfg.Width, cfg.Height, nil
}

// cleanPNG decodes b as a PNG and encodes it again.
func cleanPNG(b []byte) ([]byte, error) {
	if _, _, err := checkPNGConfig(b); err != nil {
		return nil, err
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		return nil, errors.New("the figure does not decode as a PNG image")
	}
	var out bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestSpeed}
	if err := enc.Encode(&out, img); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// figure serves a figure part as a checked PNG, after its capture_read
// record is written.
func (h *Handler) figure(c echo.Context, s *session) error {
	w, r := c.Response(), c.Request()
	cp, err := h.visibleCapture(r, s, param(c, "id"))
	if err != nil {
		return h.showError(c, s, err)
	}
	name := r.URL.Query().Get("name")
	p := cp.Part(name)
	if p == nil || !figurePart.MatchString(name) {
		return h.fail(c, s, http.StatusNotFound, fmt.Sprintf("Capture %s has no figure %q.", cp.ID, name))
	}
	if cp.Erased != nil {
		return h.fail(c, s, http.StatusGone, fmt.Sprintf("Capture %s was erased at %s by %s.", cp.ID, cp.Erased.At.UTC().Format(time.RFC3339), cp.Erased.By))
	}
	img, err := cleanPNG(p.Data)
	if err != nil {
		return h.fail(c, s, http.StatusUnsupportedMediaType, fmt.Sprintf("Capture %s, part %s: %v.", cp.ID, name, err))
	}
	if err := h.recordRead(r, s, cp, "view", p.Name); err != nil {
		return h.showError(c, s, err)
	}
	hd := w.Header()
	hd.Set("Content-Security-Policy", csp+"; sandbox")
	hd.Set("Content-Type", "image/png")
	hd.Set("Content-Disposition", fmt.Sprintf(`inline; filename="%s-%s.png"`, cp.ID, p.Name))
	hd.Set("Content-Length", strconv.Itoa(len(img)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(img)
	}
	return nil
}
