package codex

import "testing"

func TestModelCommand(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`/bin/bash -lc 'echo yes > approved.txt'`, `echo yes > approved.txt`},
		{`/bin/bash -lc 'echo '\''quoted'\'' word'`, `echo 'quoted' word`},
		{`/bin/sh -c "echo \"a\" \$HOME"`, `echo "a" $HOME`},
		{`/usr/bin/zsh -lc ls`, `ls`},
		{`bash -lc 'git status'`, `bash -lc 'git status'`},
		{`./bash -lc 'git status'`, `./bash -lc 'git status'`},
		{`/tmp/x/bash -lc 'git status'`, `/tmp/x/bash -lc 'git status'`},
		{`/bin/bash -lc 'unterminated`, `/bin/bash -lc 'unterminated`},
		{`/bin/bash -lc 'a' 'b'`, `/bin/bash -lc 'a' 'b'`},
		{`/bin/bash -lc 'ok'; rm -rf x`, `/bin/bash -lc 'ok'; rm -rf x`},
		{`python3 -c 'print(1)'`, `python3 -c 'print(1)'`},
		{`echo plain`, `echo plain`},
	} {
		if got := modelCommand(c.in); got != c.want {
			t.Errorf("modelCommand(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
