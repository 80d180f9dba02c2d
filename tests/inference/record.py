"""A test helper: the batches a Translator decodes, recorded."""
from jformer.inference.translator import Translator


def record_batches(monkeypatch, translator: Translator, record) -> None:
    """Calls ``record(inputs_BS)`` with each batch ``translator`` decodes (its source ids,
    as padded), then decodes it as before; undone after the test."""
    run = translator.programs.run

    def recording(jitted, args, devices, **static):
        record(args[2])
        return run(jitted, args, devices, **static)

    monkeypatch.setattr(translator.programs, "run", recording)
