"""bifocal_trace — exact tracing of Python code into a bifocal database.

cProfile's shape::

    import bifocal_trace
    with bifocal_trace.Profile(db="prof.db", label="repro") as p:
        work()
    print(p.session_id)            # the traced session now in prof.db

    p = bifocal_trace.Profile()    # no db: keep results in memory
    p.enable(); work(); p.disable()
    p.stats()                      # {"functions": [...], "edges": [...], ...}
    p.write("prof.db")             # -> session id

Profile(db=None, clock="wall"|"cpu", focus=None (glob on "module:qualname"),
builtins=True, tool_id=-1 (3.12+: default sys.monitoring.PROFILER_ID),
records=1<<20 (focus-mode ring size), label=None, memory=False (exact
allocations per function and edge through the PEP 445 allocator hooks; stats()
then has a "memory" member)).

`python -m bifocal_trace [--db DB] [options] -- script.py ARGS` (or `-m mod ARGS`,
`-c CMD ARGS`) runs a program under the tracer; `bifocal trace` uses this entry.
"""
import sys as _sys

from _bifocal_trace import Profile, backend, version  # noqa: F401

__all__ = ["Profile", "backend", "version"]

_USAGE = ("usage: python -m bifocal_trace [--db DB] [--session ID] [--clock wall|cpu] "
          "[--focus GLOB] [--no-builtins] [--memory] [--tool-id N] [--records N] [--label L] "
          "[--ttl-s S] [--commit C] [--command STR] [--db-dir FD:DEV:INO] "
          "-- (script.py | -m module | -c cmd) [ARGS]")


def _fail(msg, code=2):
    if msg.endswith("(tool_id=N)"):  # trc_monitoring.c names Profile's keyword; here it is an option
        msg = msg[:-len("(tool_id=N)")] + "(--tool-id N)"
    _sys.stderr.write("bifocal: %s\n" % msg)
    raise SystemExit(code)


def _parse(argv):
    opts = {"db": "bifocal.db", "session": 0, "clock": "wall", "focus": None, "builtins": True,
            "tool_id": -1, "records": 1 << 20, "label": None, "ttl_s": 0.0, "commit": None,
            "command": None, "db_dir": None, "memory": False}
    takes = {"--db": "db", "--session": "session", "--clock": "clock", "--focus": "focus",
             "--tool-id": "tool_id", "--records": "records", "--label": "label",
             "--ttl-s": "ttl_s", "--commit": "commit", "--command": "command", "--db-dir": "db_dir"}
    conv = {"session": int, "tool_id": int, "records": int, "ttl_s": float,
            "db_dir": lambda v: tuple(int(x) for x in v.split(":", 2))}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            i += 1
            break
        if a == "--no-builtins":
            opts["builtins"] = False
        elif a == "--memory":
            opts["memory"] = True
        elif a in takes:
            if i + 1 >= len(argv):
                _fail("option %s needs a value" % a)
            key = takes[a]
            try:
                opts[key] = conv.get(key, str)(argv[i + 1])
            except ValueError:
                _fail("bad value for %s: %r" % (a, argv[i + 1]))
            i += 1
        elif a in ("-h", "--help"):
            print(_USAGE)
            raise SystemExit(0)
        elif a.startswith("-") and a not in ("-m", "-c"):
            _fail("unknown option %r\n%s" % (a, _USAGE))
        else:
            break
        i += 1
    target = argv[i:]
    if not target:
        _fail("nothing to run\n" + _USAGE)
    return opts, target


def _db_at(db, db_dir):
    """How this process reaches the database: (dir_fd, name, why). db_dir is
    (FD, DEV, INO) of its directory as bifocal saw it (`bifocal trace` passes
    the directory as an inherited descriptor). The path is used where it leads
    to that directory; else the descriptor (the interpreter runs in another
    root: a chroot, a container), dir_fd then >= 0 and name the file's name in
    it; why says, in one line, why neither reaches it."""
    import os
    if db_dir is None or len(db_dir) != 3:
        return -1, db, None
    fd, ident = db_dir[0], tuple(db_dir[1:])

    def same(st):
        return st is not None and (st.st_dev, st.st_ino) == ident

    d, name = os.path.split(db)
    try:
        by_path = os.stat(d or ".")
    except OSError:
        by_path = None
    try:
        by_fd = os.fstat(fd) if fd >= 0 else None
    except OSError:
        by_fd = None
    if same(by_fd):
        os.set_inheritable(fd, False)  # not the program's to pass on
    if same(by_path):
        if same(by_fd):
            os.close(fd)
        return -1, db, None
    if same(by_fd):
        return fd, name, None
    return -1, db, ("cannot reach the database %s from this interpreter: that directory is not "
                    "visible here (the interpreter runs in another root) and the handle bifocal "
                    "passed for it (fd %d) was not inherited (a launcher closed it); give --db a "
                    "path the interpreter sees at the same place, or launch it without closing "
                    "inherited file descriptors" % (db, fd))


def _set_path0(entry):
    """sys.path[0] as `python` would have set it for this target ('' from our
    own -c start); -I / -P (safe_path) mean no such entry at all."""
    if _sys.flags.isolated or getattr(_sys.flags, "safe_path", False):
        return
    if _sys.path and _sys.path[0] == "":
        _sys.path[0] = entry
    else:
        _sys.path.insert(0, entry)


def _compile(src, fname, what):
    """The program's code; one line and exit 1 (python's status) when it does
    not compile, before anything ran (its session is dropped)."""
    try:
        return compile(src, fname, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as e:  # ValueError: a NUL byte before 3.12
        msg = getattr(e, "msg", None) or str(e)
        line = getattr(e, "lineno", None)
        _fail("%s%s: %s: %s (not started: fix the program and trace again)" % (
            what, " line %d" % line if line else "", type(e).__name__, msg), 1)


def _prepare(target):
    """Build (code, globals) for the target the way `python` would run it, and
    install the fresh __main__ module; nothing of it runs yet."""
    import os
    main = type(_sys)("__main__")  # types.ModuleType, without importing types
    g = main.__dict__
    import builtins
    g["__builtins__"] = builtins
    if target[0] == "-m":
        if len(target) < 2:
            _fail("-m needs a module name")
        import runpy
        _set_path0(os.getcwd())
        try:
            mod_name, spec, code = runpy._get_module_details(target[1])
        except ImportError as e:
            _fail("%s: %s" % (_sys.executable, e), 1)
        except BaseException as e:  # runpy reports "No module named ..." as its own error type
            _fail("%s: %s" % (_sys.executable, e), 1)
        _sys.argv = [spec.origin or target[1]] + target[2:]
        g.update(__name__="__main__", __file__=spec.origin, __cached__=spec.cached,
                 __doc__=None, __loader__=spec.loader, __package__=spec.parent, __spec__=spec)
    elif target[0] == "-c":
        if len(target) < 2:
            _fail("-c needs a command")
        _set_path0("")
        _sys.argv = ["-c"] + target[2:]
        code = _compile(target[1], "<string>", "-c")
        g.update(__name__="__main__", __doc__=None, __spec__=None, __loader__=None,
                 __package__=None)
    else:
        path = target[0]
        try:
            with open(path, "rb") as f:
                src = f.read()
        except OSError as e:
            _fail("%s: can't open file %r: [Errno %d] %s" % (_sys.executable, path, e.errno,
                                                            e.strerror), 2)
        fname = os.path.abspath(path) if _sys.version_info >= (3, 9) else path
        _set_path0(os.path.dirname(os.path.abspath(path)))
        _sys.argv = list(target)
        code = _compile(src, fname, path)
        g.update(__name__="__main__", __file__=fname, __cached__=None, __doc__=None,
                 __loader__=None, __package__=None, __spec__=None)
    _sys.modules["__main__"] = main
    return code, g


def _json_str(s):
    """s as a JSON string literal; undecodable path bytes become U+FFFD."""
    if not isinstance(s, str):
        return "null"
    out = []
    for ch in s:
        o = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif o < 0x20 or 0xD800 <= o <= 0xDFFF:
            out.append("\\u%04x" % (0xFFFD if o >= 0xD800 else o))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _interpreter():
    """The interpreter running this process, as a JSON object: what ran the
    program, not what the extension was built against. Reads only what is
    loaded at start-up (sys, _imp), so nothing is imported for the program."""
    import _imp
    v = _sys.version_info
    level = {"alpha": "a", "beta": "b", "candidate": "rc"}.get(v.releaselevel)
    version = "%d.%d.%d" % v[:3] + ("%s%d" % (level, v.serial) if level else "")
    suffix = next((x for x in _imp.extension_suffixes() if x.count(".") >= 2), "")
    abiflags = getattr(_sys, "abiflags", "")
    fields = [("implementation", _json_str(_sys.implementation.name)),
              ("version", _json_str(version)),
              ("executable", _json_str(_sys.executable or None)),  # made real after the run
              ("prefix", _json_str(_sys.prefix)),
              ("base_prefix", _json_str(getattr(_sys, "base_prefix", _sys.prefix))),
              ("soabi", _json_str(suffix[1:-3] if suffix.endswith(".so") else suffix[1:] or None)),
              ("ext_suffix", _json_str(suffix or None)),
              ("abiflags", _json_str(abiflags)),
              ("debug", "true" if hasattr(_sys, "gettotalrefcount") else "false"),
              ("free_threaded", "true" if "t" in abiflags else "false"),
              ("source", '"runtime"')]
    return dict(fields)


def _join_threads():
    threading = _sys.modules.get("threading")  # not imported: no thread of its to join
    if threading is None:
        return
    me = threading.current_thread()
    for t in threading.enumerate():
        if t is not me and not t.daemon:
            try:
                t.join()
            except BaseException:
                pass


def _main(argv=None, answer=None):
    """Run a program under the tracer and write the session (see _USAGE).
    answer (bifocal's bootstrap): called once, with "ok" when the program is
    about to be set up, or "nodb" when the database cannot be reached."""
    # _signal, not signal: signal.py would import enum and collections before
    # the program, whose own imports of them would then go uncounted
    import _signal as signal
    import _bifocal_trace as _c
    opts, target = _parse(list(_sys.argv[1:] if argv is None else argv))
    db_fd, db_name, why = _db_at(opts["db"], opts["db_dir"])
    if why:
        if answer:
            answer("nodb")
        _fail(why)
    if answer:
        answer("ok")

    def discard():
        # the program never started: leave no half-written session behind
        if opts["session"]:
            try:
                _c._discard_session(db_name, opts["session"], db_fd, opts["db"])
            except OSError as e:
                _sys.stderr.write("bifocal: %s\n" % e)

    try:
        try:
            prof = Profile(clock=opts["clock"], focus=opts["focus"], builtins=opts["builtins"],
                           tool_id=opts["tool_id"], records=opts["records"],
                           memory=opts["memory"])
        except (ValueError, RuntimeError) as e:
            _fail(str(e))
        code, g = _prepare(target)
    except SystemExit:
        discard()
        raise
    interp = _interpreter()  # before the program can change sys
    sys_executable = _sys.executable
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _c._sigterm)
    status, exit_code, outcome, exc = "complete", 0, "exit", None
    try:
        prof.run_code(code, g)
    except SystemExit as e:
        exc = e
        if _c._terminated():
            status, outcome, exit_code = "interrupted", "sigterm", 143
        else:
            outcome = "sys.exit"
            exit_code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except KeyboardInterrupt as e:
        exc, status, outcome, exit_code = e, "interrupted", "keyboardinterrupt", 130
    except RuntimeError as e:
        if not prof.running:  # enabling failed (e.g. tool id taken): nothing ran
            discard()
            _fail(str(e), 1)
        exc, outcome, exit_code = e, "exception", 1
    except BaseException as e:
        exc, outcome, exit_code = e, "exception", 1
    finally:
        if prof.running:  # run_code already stopped counting this thread
            _join_threads()
            prof.disable()
    import os
    if sys_executable:  # the real file, as /proc/PID/exe names it for a sampled session
        interp["executable"] = _json_str(os.path.realpath(sys_executable))
        if interp["executable"] != _json_str(sys_executable):
            interp["sys_executable"] = _json_str(sys_executable)
    extra = '"exit_code":%d,"outcome":"%s","python":{%s}' % (
        exit_code, outcome, ",".join('"%s":%s' % kv for kv in interp.items()))
    sites, lives = _c._await_sites(), _c._task_lifetimes()  # asyncio (trc_tasks.c)
    if sites or lives:
        extra += ',"asyncio":{"await_sites":[%s],"tasks":[%s]}' % (",".join(
            '{"file":%s,"qualname":%s,"firstlineno":%d,"line":%d,"hits":%d}' % (_json_str(f), _json_str(q), fl, ln, n)
            for f, q, fl, ln, n in sites), ",".join(
            '{"file":%s,"qualname":%s,"firstlineno":%d,"tasks":%d,"total_ns":%d,"max_ns":%d}'
            % (_json_str(f), _json_str(q), fl, n, tot, mx) for f, q, fl, n, tot, mx in lives))
    try:
        prof.write(db_name, session=opts["session"], label=opts["label"],
                   command=opts["command"] or " ".join(target), status=status,
                   ttl_s=opts["ttl_s"], commit=opts["commit"], extra=extra, dir_fd=db_fd,
                   shown_as=opts["db"])
    except OSError as e:
        _sys.stderr.write("bifocal: %s\n" % e)
        if exit_code == 0:
            exit_code = 1
    if exc is None:
        return exit_code
    if isinstance(exc, SystemExit):
        if outcome == "sigterm":
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            import os
            _sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGTERM)
        raise exc
    tb = exc.__traceback__
    if tb is not None:  # drop the runner's own frame
        exc.__traceback__ = tb = tb.tb_next
    _sys.excepthook(type(exc), exc, tb)
    if isinstance(exc, KeyboardInterrupt):
        # exit the way the interpreter does on an uncaught KeyboardInterrupt
        import os
        _sys.stdout.flush()
        _sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        return 130
    return 1


if __name__ == "__main__":
    raise SystemExit(_main())
