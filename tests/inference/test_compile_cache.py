"""jformer.inference.compile_cache: where the cache goes, and that a second process
translates from it, with the same output, without writing new programs."""
import os
import subprocess
import sys

import pytest

from jformer.inference import compile_cache

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(REPO, "tests", "fixtures", "legacy_workdir")
LINES = "The number is five.\nIt is late.\nWe need one car.\n"


def test_resolve_explicit_then_environment_then_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv(compile_cache.ENV, raising=False)
    assert compile_cache.resolve() == str(tmp_path / "xdg" / "jformer" / "xla")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert compile_cache.resolve() == str(tmp_path / "home" / ".cache" / "jformer" / "xla")
    monkeypatch.setenv(compile_cache.ENV, str(tmp_path / "env"))
    assert compile_cache.resolve() == str(tmp_path / "env")
    assert compile_cache.resolve(str(tmp_path / "mine")) == str(tmp_path / "mine")
    assert compile_cache.resolve("~/c") == str(tmp_path / "home" / "c")
    for off in ("off", "OFF", "none", "0", "", " false "):
        assert compile_cache.resolve(off) is None
        monkeypatch.setenv(compile_cache.ENV, off)
        assert compile_cache.resolve() is None
    # An explicit directory wins over an environment that says off.
    assert compile_cache.resolve(str(tmp_path / "mine")) == str(tmp_path / "mine")


# Runs the CLI in a fresh process and counts JAX's persistent-cache events in it.
COUNTING = """
import sys
import jax.monitoring
events = []
jax.monitoring.register_event_listener(lambda name, **kw: events.append(name))
from jformer.cli import main
status = main(sys.argv[1:])
hits = events.count("/jax/compilation_cache/cache_hits")
misses = events.count("/jax/compilation_cache/cache_misses")
print(f"CACHE {hits} {misses}", file=sys.stderr)
sys.exit(status)
"""


def _translate(cache: str, tmp_path, env_cache: str = "off") -> tuple[str, int, int]:
    """``jformer translate`` of LINES in a fresh process; (stdout, cache hits, misses)."""
    env = dict(os.environ, JFORMER_COMPILE_CACHE=env_cache,
               PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    done = subprocess.run([sys.executable, "-c", COUNTING, "translate", "--workdir", FIXTURE,
                           "--beam", "2", "--quiet", "--compile-cache", cache],
                          input=LINES, capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    hits, misses = map(int, done.stderr.rsplit("CACHE ", 1)[1].split())
    return done.stdout, hits, misses


@pytest.mark.slow
def test_second_process_reads_the_programs_the_first_wrote(tmp_path):
    cache = str(tmp_path / "cache")
    first, hits, misses = _translate(cache, tmp_path)
    assert len(first.splitlines()) == 3 and all(first.splitlines())
    written = sorted(os.listdir(cache))
    # The decode program took over 0.5 s to compile: it was looked up, missed, written.
    assert hits == 0 and misses >= 1 and any("decode" in name for name in written), written
    # from_checkpoint traced the model's parameter shapes once and kept them beside
    assert len(os.listdir(os.path.join(cache, "param_shapes"))) == 1
    second, hits, misses = _translate(cache, tmp_path)
    assert second == first
    assert hits >= 1 and misses == 0  # every program looked up was found
    assert sorted(os.listdir(cache)) == written
    # "off" on the command line wins over a directory in the environment: no lookups.
    env_dir = str(tmp_path / "env-cache")
    third, hits, misses = _translate("off", tmp_path, env_cache=env_dir)
    assert third == first and (hits, misses) == (0, 0) and not os.path.exists(env_dir)


def test_directory_that_cannot_be_made_is_named(tmp_path):
    import jax
    assert jax.config.jax_compilation_cache_dir is None  # the suite runs with none
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ValueError, match="a-file/xla.*cannot be created"):
        compile_cache.enable(str(blocker / "xla"))


def test_a_directory_the_process_chose_is_kept(tmp_path):
    code = ("import jax; jax.config.update('jax_compilation_cache_dir', {mine!r});"
            "from jformer.inference import compile_cache;"
            "print(compile_cache.in_use({other!r}));"
            "print(compile_cache.enable({other!r}))")
    env = dict(os.environ, PYTHONPATH=REPO)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    out = subprocess.run([sys.executable, "-c", code.format(mine=str(tmp_path / "mine"),
                                                            other=str(tmp_path / "other"))],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(tmp_path / "mine")] * 2
    assert not (tmp_path / "other").exists()


def test_in_use_names_the_directory_enable_would_take_and_creates_nothing(tmp_path):
    import jax
    assert jax.config.jax_compilation_cache_dir is None  # the suite runs with none
    assert compile_cache.in_use(str(tmp_path / "mine")) == str(tmp_path / "mine")
    assert compile_cache.in_use("off") is None
    assert not (tmp_path / "mine").exists()
