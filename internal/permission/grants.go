package permission

import (
	"fmt"
	"path"
	"strings"
)

// Grants says in plain words what an allow rule really grants, for a person
// about to add it ("allow always") or reading a session's rules, and
// reports whether the rule amounts to running arbitrary programs: a Bash
// rule for every command, for a program that runs other programs or code
// (git, env, xargs, find, shells, interpreters, sudo ...), or for a build
// or test tool that runs code the agent can write (make, npm, go, cargo
// ...); a Write or Edit rule that covers .git/config or .git/hooks, which
// git runs later outside the sandbox. Such a rule is as good as allowing
// every command: the sandbox, not the rule, is the limit.
func Grants(rule string) (text string, arbitrary bool) {
	name, pattern, ok := parse(rule)
	if !ok || name == "" {
		return fmt.Sprintf("%q is not a valid rule.", rule), false
	}
	rule = strings.TrimSpace(rule)
	switch {
	case name == "Bash":
		return bashGrants(rule, pattern)
	case alwaysAllowed(name):
		return fmt.Sprintf("%s runs without asking anyway unless a deny rule covers it; the rule adds nothing.", name), false
	case denyCovers("Write", name):
		if writesGit(pattern) {
			return fmt.Sprintf("%s allows %s on every file it names, .git/config and .git/hooks included: git runs the programs they name, later, on this machine and outside the sandbox. It is as good as allowing any command.", rule, name), true
		}
		return fmt.Sprintf("%s allows %s on files whose path, once symlinks are resolved, matches %q (relative to the working directory, or absolute).", rule, name, pattern), false
	case pattern == "":
		return fmt.Sprintf("%s allows every call of %s.", rule, name), false
	}
	return fmt.Sprintf("%s allows calls of %s whose subject matches %q.", rule, name, pattern), false
}

// bashGrants is Grants for a Bash rule.
func bashGrants(rule, pattern string) (string, bool) {
	words := strings.Fields(pattern)
	for len(words) > 0 && isAssignment(words[0]) {
		words = words[1:]
	}
	if len(words) == 0 || strings.Contains(words[0], "*") {
		return fmt.Sprintf("%s allows every command: any program, with the session's rights. Only the sandbox limits it.", rule), true
	}
	prog := path.Base(words[0])
	what := "every command matching " + pattern
	if !strings.Contains(pattern, "*") {
		what = "exactly the command " + pattern
	}
	switch {
	case prog == "git":
		return fmt.Sprintf("%s allows %s, and git runs other programs on request: git -c alias.x='!cmd' x, hooks in .git/hooks, and configuration such as core.pager, core.sshCommand and core.fsmonitor. It is as good as allowing any command; only the sandbox limits it.", rule, what), true
	case launches(prog) || interprets(prog):
		return fmt.Sprintf("%s allows %s, and %s runs whatever program or code it is given. It is as good as allowing any command; only the sandbox limits it.", rule, what, prog), true
	case builds(prog):
		return fmt.Sprintf("%s allows %s, and %s runs code from the workspace (build files, scripts, tests) that the agent can write. It is as good as allowing any command; only the sandbox limits it.", rule, what, prog), true
	}
	if strings.Contains(pattern, "*") {
		return fmt.Sprintf("%s allows %s, when the command line does not chain, substitute or redirect.", rule, what), false
	}
	return fmt.Sprintf("%s allows %s.", rule, what), false
}

// interprets reports whether the program runs code or commands given in
// its arguments or input, beyond the launchers of launches.
func interprets(prog string) bool {
	switch prog {
	case "python", "python2", "python3", "pypy", "node", "deno", "bun", "perl", "ruby", "php", "lua", "luajit",
		"Rscript", "julia", "tclsh", "wish", "osascript", "awk", "gawk", "mawk", "nawk", "sed", "gsed",
		"vi", "vim", "nvim", "emacs", "ed", "less", "more", "man", "tar", "zip", "rsync", "ssh", "scp",
		"docker", "podman", "kubectl", "gdb", "lldb", "script", "tmux", "screen", "expect", "gh", "open", "xdg-open":
		return true
	}
	return false
}

// builds reports whether the program is a build, test or package tool:
// one that runs code from the workspace.
func builds(prog string) bool {
	switch prog {
	case "make", "gmake", "cmake", "ninja", "meson", "bazel", "npm", "npx", "yarn", "pnpm", "go", "cargo",
		"rustc", "gradle", "gradlew", "./gradlew", "mvn", "ant", "rake", "bundle", "pip", "pip3", "uv", "uvx",
		"poetry", "pytest", "tox", "nox", "jest", "vitest", "mix", "dotnet", "swift", "just", "task", "composer":
		return true
	}
	return false
}

// writesGit reports whether a Write or Edit pattern covers the files in
// .git that make git run a program: the pattern is empty, or matches
// .git/config or a hook, at the working directory or under the literal
// start of an absolute pattern.
func writesGit(pattern string) bool {
	if pattern == "" {
		return true
	}
	files := []string{".git/config", ".git/hooks/pre-commit"}
	if path.IsAbs(pattern) {
		prefix, _, _ := strings.Cut(pattern, "*")
		dir := prefix
		if !strings.HasSuffix(dir, "/") {
			dir = path.Dir(dir) + "/"
		}
		files = append(files, dir+".git/config", dir+".git/hooks/pre-commit")
	}
	for _, f := range files {
		if glob(pattern, f) {
			return true
		}
	}
	return false
}
