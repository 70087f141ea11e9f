// Package docs is kahuna's documentation. Its test checks the links of the
// README and of docs/: a relative link leads to a file that exists, and a
// #fragment to a heading of its file, so moving a section cannot leave a
// link pointing at nothing.
package docs

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"
	"unicode"
)

func TestLinksLeadSomewhere(t *testing.T) {
	repo := os.DirFS("..")
	files, err := fs.Glob(repo, "docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "README.md")
	if len(files) < 2 {
		t.Fatalf("found %v: want the README and docs/*.md", files)
	}
	for _, bad := range brokenLinks(repo, files) {
		t.Error(bad)
	}
}

// The checker itself: a link to a missing file and one to a missing
// heading are reported, links into code blocks and to the web are not.
func TestBrokenLinksAreFound(t *testing.T) {
	repo := fstest.MapFS{
		"docs/a.md": {Data: []byte("# A\n\n## Two words, `code`\n\n[ok](#two-words-code) [ok](b.md#b) [web](https://x/#y)\n" +
			"[dir](../cmd) [up](../README.md#r) [gone](missing.md) [no heading](b.md#nowhere) [self](#nowhere-here)\n" +
			"[out](../../etc/passwd)\n\n```sh\n[in code](#not-checked)\n```\n")},
		"docs/b.md":    {Data: []byte("# B\n\n[back](a.md)\n")},
		"README.md":    {Data: []byte("# R\n")},
		"cmd/kahuna.x": {},
	}
	got := brokenLinks(repo, []string{"docs/a.md", "docs/b.md"})
	want := []string{
		"docs/a.md: [gone](missing.md): no such file",
		"docs/a.md: [no heading](b.md#nowhere): no heading nowhere in docs/b.md",
		"docs/a.md: [self](#nowhere-here): no heading nowhere-here in docs/a.md",
		"docs/a.md: [out](../../etc/passwd): outside the repository",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("broken links:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// link is a Markdown inline link: its text and its target.
var link = regexp.MustCompile(`\[([^\]]*)\]\(([^)\s]+)\)`)

// brokenLinks reports each relative link of files (paths in repo) whose
// file or heading does not exist.
func brokenLinks(repo fs.FS, files []string) []string {
	headings := map[string]map[string]bool{} // by page: its anchors
	anchorsOf := func(name string) (map[string]bool, error) {
		if a, ok := headings[name]; ok {
			return a, nil
		}
		b, err := fs.ReadFile(repo, name)
		if err != nil {
			return nil, err
		}
		a := anchors(string(b))
		headings[name] = a
		return a, nil
	}
	var bad []string
	for _, f := range files {
		b, err := fs.ReadFile(repo, f)
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: %v", f, err))
			continue
		}
		if _, ok := headings[f]; !ok {
			headings[f] = anchors(string(b)) // read once: its own links' fragments
		}
		for _, line := range prose(string(b)) {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				text, target := m[1], m[2]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, fragment, _ := strings.Cut(target, "#")
				dest := f
				if file != "" {
					dest = path.Join(path.Dir(f), file)
				}
				if !fs.ValidPath(dest) {
					bad = append(bad, fmt.Sprintf("%s: [%s](%s): outside the repository", f, text, target))
					continue
				}
				if !strings.HasSuffix(dest, ".md") {
					if _, err := fs.Stat(repo, dest); err != nil {
						bad = append(bad, fmt.Sprintf("%s: [%s](%s): no such file", f, text, target))
					}
					continue
				}
				a, err := anchorsOf(dest)
				switch {
				case err != nil:
					bad = append(bad, fmt.Sprintf("%s: [%s](%s): no such file", f, text, target))
				case fragment != "" && !a[fragment]:
					bad = append(bad, fmt.Sprintf("%s: [%s](%s): no heading %s in %s", f, text, target, fragment, dest))
				}
			}
		}
	}
	return bad
}

// prose is the lines of a Markdown page outside its fenced code blocks.
func prose(page string) []string {
	var lines []string
	fenced := false
	for _, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			lines = append(lines, line)
		}
	}
	return lines
}

// anchors is the fragment of each heading of a page, as GitHub makes
// them: lower case, punctuation dropped, spaces to hyphens, and a repeated
// one suffixed -1, -2, ...
func anchors(page string) map[string]bool {
	a := map[string]bool{}
	seen := map[string]int{}
	for _, line := range prose(page) {
		text, ok := strings.CutPrefix(line, "#")
		if !ok {
			continue
		}
		text = strings.TrimLeft(text, "#")
		if !strings.HasPrefix(text, " ") {
			continue // #hashtag, not a heading
		}
		var s strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(text)) {
			switch {
			case r == ' ':
				s.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				s.WriteRune(r)
			}
		}
		id := s.String()
		if n := seen[id]; n > 0 {
			seen[id]++
			id = fmt.Sprintf("%s-%d", id, n)
		} else {
			seen[id] = 1
		}
		a[id] = true
	}
	return a
}
