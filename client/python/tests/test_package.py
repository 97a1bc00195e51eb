# SPDX-License-Identifier: MIT
"""The package installs like one: a wheel built offline from a copy of the
tree (pyproject.toml, the version from meson.build), installed with pip
into a fresh venv, imports from there and finds libwsrv through WSRV_LIB;
without a library it says what to install. The documented command, pip
install ./client/python, works offline with build isolation (the build
backend needs nothing from a registry), and meson install puts the
package where the system's python3 looks."""

import glob
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.normpath(os.path.join(HERE, ".."))
TREE = os.path.normpath(os.path.join(PACKAGE, "..", ".."))


def meson_version():
    with open(os.path.join(TREE, "meson.build")) as f:
        return re.search(r"version:\s*'([^']+)'", f.read()).group(1)


def copy_tree(dst):
    """The package and the meson.build it reads its version from, laid out
    as in the tree (building in place would leave build/ and egg-info)."""
    os.makedirs(os.path.join(dst, "client"))
    shutil.copy(os.path.join(TREE, "meson.build"), dst)
    shutil.copytree(PACKAGE, os.path.join(dst, "client", "python"),
                    ignore=shutil.ignore_patterns("tests", "examples", "__pycache__", "*.egg-info",
                                                  "build", "meson.build"))
    return os.path.join(dst, "client", "python")


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "WSRV_LIB", "LD_LIBRARY_PATH")}
    env.update(extra)
    return env


def make_venv(path):
    """A venv that sees what this interpreter sees: the system's site
    packages, and, when this interpreter is itself a venv's (a GPU image
    runs torch and numpy from one, and /usr has neither), that venv's
    site packages too, through a .pth file."""
    import site
    import sysconfig

    run(sys.executable, "-m", "venv", "--system-site-packages", str(path))
    py = str(path / "bin" / "python")
    if sys.prefix != sys.base_prefix:
        inner = run(py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))").stdout.strip()
        outer = [d for d in site.getsitepackages() + [sysconfig.get_path("purelib")] if os.path.isdir(d)]
        with open(os.path.join(inner, "wsrv-outer-venv.pth"), "w") as f:
            f.write("\n".join(dict.fromkeys(outer)) + "\n")
    return py


def run(*args, **kw):
    r = subprocess.run(args, capture_output=True, text=True, timeout=240, **kw)
    assert r.returncode == 0, f"{args}: {r.stdout}\n{r.stderr}"
    return r


def probe(py, cwd):
    r = run(py, "-c", "import wsrv, wsrv.hf; print(wsrv.__file__); print(wsrv.version())", cwd=cwd,
            env=clean_env(WSRV_LIB=os.environ["WSRV_LIB"]))
    return r.stdout.split()


def test_documented_install_offline(tmp_path):
    """pip install ./client/python in a venv (numpy from the system's
    site), with build isolation and no index (the build backend needs
    nothing from a registry). Then an sdist, and -e."""
    src = copy_tree(str(tmp_path / "src"))
    venv = tmp_path / "venv"
    py = make_venv(venv)
    run(py, "-m", "pip", "install", "--no-index", src, env=clean_env())
    where, version = probe(py, str(tmp_path))
    assert where.startswith(str(venv)) and version == meson_version(), where
    run(py, "-m", "pip", "uninstall", "-y", "wsrv", env=clean_env())
    run(py, "-m", "pip", "install", "--no-index", "-e", src, env=clean_env())
    where, _ = probe(py, str(tmp_path))
    assert where == os.path.join(src, "wsrv", "__init__.py"), where
    run(py, "-m", "pip", "uninstall", "-y", "wsrv", env=clean_env())
    sdist = run(py, "-c", f"import sys; sys.path.insert(0, {os.path.join(src, '_build')!r}); "
                f"import wsrv_build; print(wsrv_build.build_sdist({str(tmp_path)!r}))", env=clean_env())
    run(py, "-m", "pip", "install", "--no-index", str(tmp_path / sdist.stdout.strip()), env=clean_env())
    where, version = probe(py, str(tmp_path))
    assert where.startswith(str(venv)) and version == meson_version(), where


def test_meson_installs_where_python_looks(tmp_path, server):
    """meson install puts wsrv/ in a folder on the configured python's
    path (it went to PREFIX/lib/python3/dist-packages, which is not; and
    for a venv's python, to a folder under PREFIX that it never reads).
    Asked of a release setup of this tree with this build's python: a
    build with the tests' seams installs nothing (tools/install-check).
    Installed under DESTDIR, the package imports and attaches a model
    (issue 79 item 2: a hand-kept list lacked _bulk.py, and the import
    failed), and its dist-info names vLLM's entry point."""
    import json

    build = os.path.dirname(os.path.dirname(os.path.realpath(os.environ["WSRV_LIB"])))
    opts = json.loads(run("meson", "introspect", build, "--buildoptions").stdout)
    configured = next((o["value"] for o in opts if o["name"] == "python"), "")
    python = configured if os.access(configured, os.X_OK) else sys.executable
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    scratch = str(tmp_path / "release")
    run("meson", "setup", scratch, root, "-Dbuildtype=release", "-Dtests=disabled", "-Dpython=" + python)
    out = run("meson", "introspect", scratch, "--installed").stdout
    pkg = [dst for dst in json.loads(out).values() if dst.endswith("/wsrv")]
    assert len(pkg) == 1, pkg
    pkg_dir = os.path.dirname(pkg[0])
    path = run(python, "-c", "import sys; print(chr(10).join(sys.path))").stdout.split()
    assert pkg_dir in path, (pkg_dir, path)
    dest = str(tmp_path / "dest")
    run("meson", "compile", "-C", scratch, "wsrv-dist-info")
    run("meson", "install", "-C", scratch, "--no-rebuild", "--tags", "python-runtime", "--destdir", dest)
    site = dest + pkg_dir
    assert os.path.exists(os.path.join(site, "wsrv", "py.typed"))
    probe = ("import sys, wsrv, importlib.metadata as md; assert wsrv.__file__.startswith(sys.argv[1]), wsrv.__file__; "
             "m = wsrv.connect(sys.argv[2]).attach('llama'); print(m['model.norm.weight'].nbytes); "
             "print([e.value for e in md.entry_points(group='vllm.general_plugins') if e.name == 'wsrv'])")
    r = run(python, "-c", probe, site, server.sock, cwd=str(tmp_path),
            env=clean_env(PYTHONPATH=site, WSRV_LIB=os.environ["WSRV_LIB"]))
    assert r.stdout.split("\n")[0].isdigit() and "wsrv.vllm:register" in r.stdout, r.stdout


def test_wheel_installs_and_imports(tmp_path):
    src = copy_tree(str(tmp_path / "src"))
    run(sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index",
        "-w", str(tmp_path / "wheel"), src, env=clean_env())
    wheels = glob.glob(str(tmp_path / "wheel" / "*.whl"))
    assert [os.path.basename(w) for w in wheels] == [f"wsrv-{meson_version()}-py3-none-any.whl"]
    venv = tmp_path / "venv"
    py = make_venv(venv)
    run(py, "-m", "pip", "install", "--no-deps", "--no-index", wheels[0], env=clean_env())
    probe = "import wsrv, wsrv.hf; print(wsrv.__file__); print(wsrv.version())"
    r = run(py, "-c", probe, cwd=str(tmp_path), env=clean_env(WSRV_LIB=os.environ["WSRV_LIB"]))
    where, version = r.stdout.split()
    assert where.startswith(str(venv)), where
    assert version == meson_version()
    # Without the C library: an ImportError that says what to install
    # (unless this machine has libwsrv installed where the loader looks).
    r = subprocess.run([py, "-c", "import wsrv"], capture_output=True, text=True, timeout=120,
                       cwd=str(tmp_path), env=clean_env())
    if r.returncode != 0:
        assert "install it from the wsrv tree" in r.stderr and "WSRV_LIB" in r.stderr, r.stderr
