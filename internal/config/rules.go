package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ProjectRules are allow rules a person saved for a project ("allow
// always" with --save), by the project's absolute directory. They live in
// a file vigil writes in the user's config directory
// (vigil/project-rules.yaml), never in the project: a repository cannot
// loosen its own permissions, and a person's answer survives the session.
type ProjectRules map[string][]string

// RulesFile returns the path of the user's project rules file, or "" when
// there is no config directory.
func RulesFile(env Env) string {
	base := env("XDG_CONFIG_HOME")
	if base == "" {
		if home := env("HOME"); home != "" {
			base = filepath.Join(home, ".config")
		}
	}
	if base == "" {
		return ""
	}
	return filepath.Join(base, "vigil", "project-rules.yaml")
}

// LoadProjectRules reads the rules file; a missing file holds no rules.
func LoadProjectRules(path string) (ProjectRules, error) {
	r := ProjectRules{}
	if path == "" {
		return r, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read project rules %s: %w", path, err)
	}
	if err := yaml.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("project rules %s: %w", path, err)
	}
	return r, nil
}

// For returns the rules saved for dir and for the directories above it.
func (r ProjectRules) For(dir string) []string {
	if dir == "" {
		return nil
	}
	dir = filepath.Clean(dir)
	var out []string
	for p, rules := range r {
		p = filepath.Clean(p)
		if dir == p || strings.HasPrefix(dir, p+string(filepath.Separator)) {
			out = append(out, rules...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// SaveProjectRule adds rule for the project at dir (absolute) to the rules
// file, written whole through a temporary file with mode 0600.
func SaveProjectRule(path, dir, rule string) error {
	if path == "" {
		return errors.New("no config directory to keep project rules in (set HOME or XDG_CONFIG_HOME)")
	}
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("project directory %q is not absolute", dir)
	}
	r, err := LoadProjectRules(path)
	if err != nil {
		return err
	}
	dir = filepath.Clean(dir)
	if slices.Contains(r[dir], rule) {
		return nil
	}
	r[dir] = append(r[dir], rule)
	b, err := yaml.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode project rules: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("project rules: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".project-rules-*")
	if err != nil {
		return fmt.Errorf("project rules: %w", err)
	}
	defer os.Remove(tmp.Name())
	head := "# Allow rules a person saved for a project (vigil approve --always --save).\n# vigil writes this file; a rule here applies to sessions in the directory and below.\n"
	if _, err := tmp.WriteString(head + string(b)); err != nil {
		tmp.Close()
		return fmt.Errorf("write project rules: %w", err)
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("project rules: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write project rules: %w", err)
	}
	return os.Rename(tmp.Name(), path)
}
