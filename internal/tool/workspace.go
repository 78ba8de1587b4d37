package tool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Workspace runs the file tools (Read, Write, Edit, Glob, Grep) confined to
// a set of directory trees.
//
// A path is allowed only when it lies under one of Roots both as written
// (after cleaning) and after every symlink in it is resolved. Files are
// then opened through an os.Root on the containing root, so a symlink
// swapped in after the check cannot lead outside either.
//
// The Workspace is where the session's permission rules are enforced on
// the path a call really touches: with Permissions set, the resolved path
// is checked against them (see Permissions), and Glob and Grep leave out,
// and count, every entry a deny rule covers. ReadOnly and ReadOnlyPaths
// carry the sandbox mode's write protection to the file tools. A hard link
// cannot be told from the file it links to by its path: Write and Edit
// replace a file by renaming a new one over it, so they never write
// through a hard link into a protected file, but Read of a hard link to a
// denied file is not caught; the kernel sandbox is the boundary for that.
//
// The zero value of every field but Roots checks nothing beyond the roots.
type Workspace struct {
	// Roots are the directories the tools may touch. The first one is the
	// working directory: relative paths resolve against it, relative rules
	// are anchored at it, and Glob and Grep show paths relative to it.
	// Relative roots resolve against the process's working directory.
	Roots []string
	// Permissions, when set, are the session's permission mode and rules,
	// checked again on every path once resolved. Nil checks no rule: the
	// caller decided on its own.
	Permissions *Permissions
	// ReadOnly refuses Write and Edit: the session's sandbox mode is
	// read-only.
	ReadOnly bool
	// ReadOnlyPaths are files and directories Write and Edit must not
	// change, such as each root's .git in the sandbox mode
	// workspace-write: a call whose path, as written or resolved, lies in
	// one is refused. Relative paths are relative to the first root.
	ReadOnlyPaths []string
}

// Exec runs the named file tool with the JSON input the model gave and
// returns the tool result. Failures, including invalid input, a path outside
// the workspace, a path the rules refuse and an unknown tool name, are
// results with isError set, worded for the model; Exec does not panic on
// any input.
func (w *Workspace) Exec(ctx context.Context, name string, input json.RawMessage) (content string, isError bool) {
	var run func(context.Context, *fsys, args) (string, error)
	switch name {
	case "Read":
		run = execRead
	case "Write":
		run = execWrite
	case "Edit":
		run = execEdit
	case "Glob":
		run = execGlob
	case "Grep":
		run = execGrep
	default:
		return fmt.Sprintf("unknown tool %q: the workspace runs Read, Write, Edit, Glob and Grep", name), true
	}
	d, _ := lookup(name)
	in, err := parseInput(d, input)
	if err != nil {
		return err.Error(), true
	}
	if err := ctx.Err(); err != nil {
		return fmt.Sprintf("%s cancelled: %v", name, err), true
	}
	if w.ReadOnly && Edits(name) {
		return fmt.Sprintf("%s is refused: the session's sandbox is read-only", name), true
	}
	f, err := w.fsys(name)
	if err != nil {
		return err.Error(), true
	}
	out, err := run(ctx, f, in)
	if err != nil {
		return err.Error(), true
	}
	return out, false
}

// fsys is a Workspace's roots, resolved for one call, and the rules the
// call is held to.
type fsys struct {
	given []string // absolute, cleaned, as configured
	real  []string // with symlinks resolved; same order
	rules rules
}

func (w *Workspace) fsys(tool string) (*fsys, error) {
	if len(w.Roots) == 0 {
		return nil, errors.New("the workspace has no roots")
	}
	f := &fsys{rules: rules{tool: tool, perms: w.Permissions, readOnly: w.ReadOnly}}
	for _, r := range w.Roots {
		abs, err := filepath.Abs(r)
		if err != nil {
			return nil, fmt.Errorf("workspace root %q: %w", r, err)
		}
		real, err := evalExisting(abs)
		if err != nil {
			return nil, fmt.Errorf("workspace root %q: %w", r, err)
		}
		f.given = append(f.given, abs)
		f.real = append(f.real, real)
	}
	protect, err := protectPaths(f.given, w.ReadOnlyPaths)
	if err != nil {
		return nil, err
	}
	f.rules.protect = protect
	return f, nil
}

func (f *fsys) rootList() string { return strings.Join(f.given, ", ") }

// resolved is a path checked to be inside the workspace.
type resolved struct {
	real string // absolute, symlinks resolved (for the part that exists)
	root string // the real root that holds it
	rel  string // real relative to root
}

// resolve checks that path (absolute, or relative to the working directory)
// is inside a root both lexically and once its symlinks are resolved. The
// path need not exist; its nearest existing ancestor is resolved.
func (f *fsys) resolve(path string) (resolved, error) {
	if path == "" {
		return resolved{}, errors.New("the path is empty")
	}
	abs := path
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(f.given[0], abs)
	}
	abs = filepath.Clean(abs)
	if !within(f.given, abs) && !within(f.real, abs) {
		return resolved{}, fmt.Errorf("path %q is outside the workspace (roots: %s)", path, f.rootList())
	}
	real, err := evalExisting(abs)
	if err != nil {
		return resolved{}, fmt.Errorf("path %q: %w", path, err)
	}
	for _, root := range f.real {
		if rel, ok := relWithin(root, real); ok {
			return resolved{real: real, root: root, rel: rel}, nil
		}
	}
	return resolved{}, fmt.Errorf("path %q resolves through a symlink to %q, outside the workspace (roots: %s)",
		path, real, f.rootList())
}

// display shows a real path relative to the working directory when it is
// inside it, else absolute.
func (f *fsys) display(real string) string {
	if rel, ok := relWithin(f.real[0], real); ok {
		return filepath.ToSlash(rel)
	}
	return real
}

// open opens the os.Root a resolved path lies in. The caller closes it.
func (r resolved) open() (*os.Root, error) {
	root, err := os.OpenRoot(r.root)
	if err != nil {
		return nil, fmt.Errorf("open workspace root: %w", err)
	}
	return root, nil
}

// maxLinkHops bounds the dangling symlinks evalExisting follows, as the
// kernel bounds symlink chains.
const maxLinkHops = 40

// evalExisting resolves the symlinks of the longest existing prefix of the
// absolute, clean path abs and appends the rest, which does not exist and
// so holds no symlink. A dangling symlink resolves to where its target
// would be, since writing through it would create that target.
func evalExisting(abs string) (string, error) {
	return evalExistingHops(abs, 0)
}

func evalExistingHops(abs string, hops int) (string, error) {
	cur := abs
	var tail []string
	for {
		_, err := os.Lstat(cur)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("stat %s: %w", cur, unwrapPath(err))
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			break
		}
		tail = append(tail, filepath.Base(cur))
		cur = parent
	}
	slices.Reverse(tail)
	real, err := filepath.EvalSymlinks(cur)
	if errors.Is(err, fs.ErrNotExist) && hops < maxLinkHops {
		// cur exists, so every directory above it resolves: cur is a
		// symlink whose target does not exist (yet).
		target, lerr := os.Readlink(cur)
		if lerr == nil {
			if !filepath.IsAbs(target) {
				target = filepath.Join(filepath.Dir(cur), target)
			}
			return evalExistingHops(filepath.Join(append([]string{target}, tail...)...), hops+1)
		}
	}
	if err != nil {
		return "", fmt.Errorf("resolve symlinks of %s: %w", cur, unwrapPath(err))
	}
	return filepath.Join(append([]string{real}, tail...)...), nil
}

// unwrapPath drops the *fs.PathError wrapper, whose path the caller names.
func unwrapPath(err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err
	}
	return err
}

// within reports whether p is one of roots or below one.
func within(roots []string, p string) bool {
	for _, r := range roots {
		if _, ok := relWithin(r, p); ok {
			return true
		}
	}
	return false
}

// relWithin returns p relative to root when p is root or below it.
func relWithin(root, p string) (string, bool) {
	rel, err := filepath.Rel(root, p)
	if err != nil || filepath.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", false
	}
	return rel, true
}

// Resolve returns where a path, as a model writes it for a file tool, leads:
// absolute, cleaned and with every symlink resolved (the nearest existing
// ancestor of a path that does not exist yet). A person asked to approve a
// call should be shown this path, since it is the one the call touches.
// A path outside the roots is an error, as it is for the tools.
func (w *Workspace) Resolve(path string) (string, error) {
	f, err := w.fsys("")
	if err != nil {
		return "", err
	}
	r, err := f.resolve(path)
	if err != nil {
		return "", err
	}
	return r.real, nil
}
