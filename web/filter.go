package web

import (
	"bytes"
	"encoding/json"
	"html"
	"html/template"
	"net/http"
	"strconv"
	"strings"
)

// minSecretLen is the shortest secret accepted: redacting a very short
// string would mangle ordinary output, and such a token is guessable.
const minSecretLen = 16

// redacted replaces a secret found in a response.
var redacted = []byte("[redacted]")

// escapeProbe renders a value the way the page's templates do, in text and
// in a quoted attribute, so the escaped forms of a secret are known.
var escapeProbe = template.Must(template.New("probe").Parse("{{.}}\x00<p title=\"{{.}}\">"))

// secretForms returns the encodings in which s could appear in a response:
// as is, HTML-escaped (by html/template in text and attributes, and by the
// standard escapers) and JSON-escaped.
func secretForms(s string) []string {
	if s == "" {
		return nil
	}
	forms := []string{s, html.EscapeString(s), template.HTMLEscapeString(s)}
	var b bytes.Buffer
	if err := escapeProbe.Execute(&b, s); err == nil {
		text, attr, _ := strings.Cut(b.String(), "\x00<p title=\"")
		forms = append(forms, text, strings.TrimSuffix(attr, "\">"))
	}
	if b, err := json.Marshal(s); err == nil && len(b) >= 2 {
		forms = append(forms, string(b[1:len(b)-1]))
	}
	out := forms[:0]
	seen := map[string]bool{}
	for _, f := range forms {
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	return out
}

// filterWriter buffers a response so that configured secrets can be
// redacted before any byte leaves. Responses here are small (a page, a
// JSON document, a metrics exposition), so buffering is cheap.
type filterWriter struct {
	w        http.ResponseWriter
	secrets  []string
	buf      bytes.Buffer
	code     int
	redacted bool
}

func (f *filterWriter) Header() http.Header { return f.w.Header() }

func (f *filterWriter) WriteHeader(code int) {
	if f.code == 0 {
		f.code = code
	}
}

func (f *filterWriter) Write(p []byte) (int, error) {
	if f.code == 0 {
		f.code = http.StatusOK
	}
	return f.buf.Write(p)
}

// flush redacts and sends the buffered response.
func (f *filterWriter) flush() error {
	body := f.buf.Bytes()
	for _, s := range f.secrets {
		if bytes.Contains(body, []byte(s)) {
			body = bytes.ReplaceAll(body, []byte(s), redacted)
			f.redacted = true
		}
	}
	if f.code == 0 {
		f.code = http.StatusOK
	}
	h := f.w.Header()
	for _, vs := range h {
		for i, v := range vs {
			for _, s := range f.secrets {
				if strings.Contains(v, s) {
					v = strings.ReplaceAll(v, s, string(redacted))
					vs[i] = v
					f.redacted = true
				}
			}
		}
	}
	// Keep a handler's own length (a HEAD answer has no body but its
	// length) unless redaction changed the body.
	if f.redacted || h.Get("Content-Length") == "" {
		h.Set("Content-Length", strconv.Itoa(len(body)))
	}
	f.w.WriteHeader(f.code)
	_, err := f.w.Write(body)
	return err
}
