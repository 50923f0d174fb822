package console

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"time"

	"github.com/walpost/walpost/internal/ops"
)

//go:embed web
var web embed.FS

// pageData is what web/console.html renders.
type pageData struct {
	Role    string
	Operate bool
	CSRF    string
	Now     time.Time
	Sources []sourcePage
}

// sourcePage is one source on the page.
type sourcePage struct {
	Detail
	Chart chart
}

func parsePage() (*template.Template, error) {
	return template.New("console.html").Funcs(template.FuncMap{
		"bytes": func(n *int64) string {
			if n == nil {
				return "-"
			}
			return ops.HumanBytes(*n)
		},
		"pretty": func(raw json.RawMessage) string { return ops.Pretty(raw, "") },
		"seconds": func(s float64) string {
			return (time.Duration(s * float64(time.Second))).Round(time.Second).String()
		},
		"rate": func(r *float64) string {
			if r == nil {
				return "–"
			}
			return fmt.Sprintf("%.1f/s", *r)
		},
		"count":  func(f float64) string { return fmt.Sprintf("%.0f", f) },
		"when":   func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
		"sink":   ops.SinkPhrase,
		"fix":    func(m ops.Message) string { return m.Fix() },
		"deref":  ops.Deref,
		"dict2":  func(sink, key string) ActionRequest { return ActionRequest{Sink: ops.SinkLabel(sink), Key: key} },
		"refs1":  func(ref string) ActionRequest { return ActionRequest{Messages: []string{ref}} },
		"group1": func(id string) ActionRequest { return ActionRequest{Group: id} },
		"body": func(v any) (string, error) {
			b, err := json.Marshal(v)
			return string(b), err
		},
	}).ParseFS(web, "web/console.html")
}

func (c *Console) servePage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	role := roleOf(r)
	d := pageData{Role: role.String(), Operate: role == RoleOperate, Now: time.Now()}
	if d.Operate {
		d.CSRF = c.csrf
	}
	d.Sources = eachSource(c.sources, func(s *source) sourcePage {
		det := c.detail(ctx, s, true)
		return sourcePage{Detail: det, Chart: chartOf(det.History)}
	})
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := c.page.Execute(w, d); err != nil {
		c.log.Warn().Err(err).Msg("console: rendering the page")
	}
}

// serveAsset serves web/NAME (the style sheet and the script).
func serveAsset(w http.ResponseWriter, r *http.Request) {
	name := path.Base(r.PathValue("name"))
	b, err := fs.ReadFile(web, "web/"+name)
	if err != nil || name == "console.html" {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", mime.TypeByExtension(path.Ext(name)))
	w.Write(b)
}
