"""train.coordinator_address: host:port with the process count and id, or "auto" (JAX
reads them from SLURM, Cloud TPU VMs, Open MPI, Kubernetes), checked before joining."""
import jax
import pytest

from jformer import train as train_lib
from jformer.config import ConfigError, TrainConfig


@pytest.fixture
def joins(monkeypatch):
    """jax.distributed.initialize's calls, none made (nor the CPU collectives set)."""
    calls = []
    monkeypatch.setattr(jax.config, "update", lambda *a: None)
    monkeypatch.setattr(jax.distributed, "initialize", lambda *a, **k: calls.append((a, k)))
    return calls


def test_auto_lets_jax_read_the_cluster(joins):
    train_lib.maybe_initialize_distributed({"coordinator_address": "auto"})
    assert joins == [((), {})]


def test_an_address_passes_the_count_and_id(joins):
    train_lib.maybe_initialize_distributed(TrainConfig(
        coordinator_address="node1:1234", num_processes=4, process_id=2))
    assert joins == [(("node1:1234",), {"num_processes": 4, "process_id": 2})]


def test_single_process_joins_nothing(joins):
    train_lib.maybe_initialize_distributed(TrainConfig())
    assert joins == []


def test_auto_with_a_count_or_id_is_an_error(joins):
    with pytest.raises(ConfigError, match=r"'train.num_processes': expected 1 .*'auto' takes "
                                          r"the process count and id from the cluster"):
        train_lib.maybe_initialize_distributed({"coordinator_address": "auto",
                                                "num_processes": 2, "process_id": 1})
    assert joins == []


def test_auto_without_a_cluster_says_what_to_set(monkeypatch):
    def no_cluster():
        raise ValueError("coordinator_address should be defined.")
    monkeypatch.setattr(jax.config, "update", lambda *a: None)
    monkeypatch.setattr(jax.distributed, "initialize", no_cluster)
    with pytest.raises(ConfigError, match=r"'auto': JAX found no cluster .*should be "
                                          r"defined\. Set train.coordinator_address=host:port"):
        train_lib.maybe_initialize_distributed({"coordinator_address": "auto"})
