"""The REPL: from a pipe (no prompt noise) and as a person uses it, typing in
tmux and reading the screen (history, completion, use, multi-line Lua, Ctrl-C)."""
import os
import shutil
import subprocess
import uuid

import pytest

from conftest import bifocal_bin, run, task_cpu_ns, wait_until
from lua_story import make_story


@pytest.fixture
def story(db):
    make_story(db)
    return db


# ---- pipe ------------------------------------------------------------------------


def test_pipe_runs_commands_without_prompt(story):
    cmds = "\n".join([
        "# a comment",
        "sessions",
        "use base",
        "replay --limit 2",
        "= session.kind, session.id",
        "lua for i = 1, 3 do",
        "  io.write(i * 10, ' ')",
        "end print()",
        "help correlate",
        "correlate 1 repro --limit 1",
        "quit",
        "sessions",
    ]) + "\n"
    r = run([], db=story, input=cmds, check=False)
    assert r.returncode == 0, r.stderr
    assert "bifocal>" not in r.stdout and "...>" not in r.stdout and "bifocal 0" not in r.stdout
    assert "base" in r.stdout and "regressed" in r.stdout
    assert "parse" in r.stdout and "… 3 more" in r.stdout  # replay used the current session
    assert '"sampled"\t1' in r.stdout
    assert "10 20 30" in r.stdout
    assert "usage: bifocal correlate SAMPLED TRACED" in r.stdout
    assert "spearman" in r.stdout
    assert r.stdout.count("  ID KIND") == 1  # nothing after quit
    assert r.stderr == ""


def test_pipe_errors_and_status(story):
    r = run([], db=story, input="nosuch\n", check=False)
    assert r.returncode == 2 and "unknown command 'nosuch' (type `help`)" in r.stderr
    r = run([], db=story, input="lua error('boom')\n", check=False)
    assert r.returncode == 1 and "lua:1: boom" in r.stderr
    r = run([], db=story, input="use 99\n", check=False)
    assert r.returncode == 1 and "99" in r.stderr
    r = run([], db=story, input='replay "1 --limit 2\n', check=False)
    assert r.returncode == 2 and "unterminated quote" in r.stderr
    r = run([], db=story, input="lua for i = 1, 2 do\n", check=False)
    assert r.returncode == 1 and "unfinished Lua chunk" in r.stderr
    r = run([], db=story, input="replay 'base' --limit 1\n", check=False)
    assert r.returncode == 0 and "parse" in r.stdout


def test_pipe_help_lists_commands_and_builtins(story):
    r = run([], db=story, input="help\nhelp use\n", check=False)
    assert r.returncode == 0
    for word in ("sessions", "correlate", "run", "use [ID|LABEL|none]", "lua CODE", "= EXPR", "quit"):
        assert word in r.stdout
    assert "usage: use [ID|LABEL|none]" in r.stdout


def test_pipe_use_none_and_lua_session(story):
    r = run([], db=story, input="use 2\n= session.kind\nuse none\n= session\nuse\n", check=False)
    assert r.returncode == 0, r.stderr
    assert '"traced"' in r.stdout and "nil" in r.stdout and "no current session" in r.stdout


# ---- tmux: a person at a terminal -------------------------------------------------

tmux = shutil.which("tmux")


class Screen:
    def __init__(self, tmp_path, db):
        self.sock = "bf-" + uuid.uuid4().hex[:8]
        self.hist = str(tmp_path / "history")
        env = "HOME=%s BIFOCAL_HISTORY=%s TERM=xterm NO_COLOR=1" % (tmp_path, self.hist)
        cmd = "env %s %s --db %s" % (env, bifocal_bin(), db)
        subprocess.run([tmux, "-L", self.sock, "-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", "150", "-y",
                        "50", cmd], check=True)
        self.wait_for("bifocal>")

    def tmux(self, *args):
        return subprocess.run([tmux, "-L", self.sock] + list(args), capture_output=True, text=True)

    def type(self, text, enter=True):
        self.tmux("send-keys", "-t", "t", "-l", text)
        if enter:
            self.tmux("send-keys", "-t", "t", "Enter")

    def key(self, *keys):
        self.tmux("send-keys", "-t", "t", *keys)

    def complete(self, text, shown):
        """Types text, presses Tab and waits for the completed line to show."""
        self.type(text, enter=False)
        self.key("Tab")
        return self.wait_for(shown)

    def screen(self):
        return self.tmux("capture-pane", "-p", "-t", "t", "-S", "-200").stdout

    def wait_for(self, text, timeout=10):
        s = wait_until(lambda: (lambda s: s if text in s else "")(self.screen()), timeout, interval=0.05)
        if not s:
            raise AssertionError("%r not on screen:\n%s" % (text, self.screen()))
        return s

    def alive(self):
        return self.tmux("has-session", "-t", "t").returncode == 0

    def close(self):
        self.tmux("kill-server")


@pytest.fixture
def screen(story, tmp_path):
    if not tmux:
        pytest.skip("tmux not installed")
    s = Screen(tmp_path, story)
    yield s
    s.close()


def test_tmux_session_as_a_person(screen):
    s = screen
    assert "`help` lists commands" in s.screen()
    # Tab completes a command name
    s.complete("sess", "bifocal> sessions")
    s.key("Enter")
    s.wait_for("regressed")
    # Tab completes a session label; `use` changes the prompt
    s.complete("use regr", "use regressed")
    s.key("Enter")
    s.wait_for("bifocal[3]>")
    # an option by Tab, then a view with no id (the current session)
    s.complete("replay --lim", "replay --limit")
    s.type(" 1")
    s.wait_for("… 3 more")
    # multi-line Lua
    s.type("lua for i = 1, 2 do")
    s.wait_for("...>")
    s.type("print('line' .. i)")
    s.type("end")
    s.wait_for("line2")
    # a function name completes inside Lua
    s.complete('= session:func("pars', 'session:func("parse"')
    s.type(").self_samples")
    s.wait_for("\n1500")
    # shipped script names complete after `run`
    s.complete("run gat", "run gate.lua")
    # and the script's own options, from its usage line
    s.complete(" base regressed --max-i", "--max-increase")
    s.key("C-u")
    # help
    s.type("help run")
    s.wait_for("usage: bifocal run")
    # Ctrl-C at the prompt drops the line and keeps the REPL
    s.type("this is abandoned", enter=False)
    s.key("C-c")
    s.type("= 6 * 7")
    s.wait_for("42")
    # Ctrl-C stops runaway Lua
    s.type("lua while true do end")
    pid = int(s.tmux("display-message", "-p", "-t", "t", "#{pane_pid}").stdout)
    c0 = task_cpu_ns(pid)  # the loop runs: bifocal burns CPU
    wait_until(lambda: task_cpu_ns(pid) - c0 > 100e6, 30, what="the Lua loop to run")
    s.key("C-c")
    s.wait_for("interrupted")
    s.type("= 'still here'")
    s.wait_for('"still here"')
    # Ctrl-D leaves and writes the history
    s.key("C-d")
    wait_until(lambda: not s.alive(), 10)
    assert not s.alive()
    with open(s.hist) as f:
        hist = f.read()
    assert "use regressed" in hist and "= 6 * 7" in hist


def test_tmux_history_recalled(screen, story, tmp_path):
    s = screen
    s.type("= 'first' .. 'entry'")
    s.wait_for('"firstentry"')
    s.type("quit")
    wait_until(lambda: not s.alive(), 10)
    s2 = Screen(tmp_path, story)
    try:
        s2.key("Up")
        s2.wait_for("bifocal> quit")
        s2.key("Up")
        s2.wait_for("bifocal> = 'first' .. 'entry'")
    finally:
        s2.close()
