"""pyproject.toml: the accelerator extras install the JAX that the core install would."""
import pathlib
import tomllib

from packaging.requirements import Requirement

PYPROJECT = pathlib.Path(__file__).resolve().parents[1] / "pyproject.toml"
ACCELERATOR_EXTRAS = ("cuda12", "cuda13", "tpu")  # each is also jax's extra of that name


def jax_range_problems(project: dict) -> list[str]:
    """Each accelerator extra whose jax requirement is missing, names another plugin, or
    asks for another version range than the core dependency (pip would then mix two
    JAX versions, or a JAX and a plugin of another version)."""
    def jax_reqs(requirements):
        return [r for r in map(Requirement, requirements) if r.name == "jax"]

    (core,) = jax_reqs(project["dependencies"])
    problems = []
    for extra in ACCELERATOR_EXTRAS:
        reqs = jax_reqs(project.get("optional-dependencies", {}).get(extra, []))
        if len(reqs) != 1 or reqs[0].extras != {extra}:
            problems.append(f"extra {extra!r} must ask for exactly jax[{extra}]; got {reqs}")
        elif reqs[0].specifier != core.specifier:
            problems.append(f"extra {extra!r} asks for jax{reqs[0].specifier}; the core "
                            f"install asks for jax{core.specifier}")
    return problems


def test_each_accelerator_extra_pins_jax_to_the_core_range():
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    assert jax_range_problems(project) == []


def test_a_range_that_drifts_is_found():
    project = {"dependencies": ["jax>=0.10,<0.11"],
               "optional-dependencies": {"cuda12": ["jax[cuda12]>=0.10"],
                                         "cuda13": ["jax[cuda12]>=0.10,<0.11"]}}
    assert jax_range_problems(project) == [
        "extra 'cuda12' asks for jax>=0.10; the core install asks for jax<0.11,>=0.10",
        "extra 'cuda13' must ask for exactly jax[cuda13]; got [<Requirement('jax[cuda12]<0.11,>=0.10')>]",
        "extra 'tpu' must ask for exactly jax[tpu]; got []"]
