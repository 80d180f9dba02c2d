"""``jformer serve``: a batched HTTP translation API with a web page and metrics.

    from jformer.serve import ServeLimits, create_app
    app = create_app(translator, ServeLimits(max_wait_ms=5))   # any ASGI server runs it

Needs the ``serve`` extra (``pip install -e '.[serve]'``: fastapi, uvicorn, pydantic,
prometheus_client). Layout: :mod:`.app` routes and life cycle, :mod:`.batcher` the
dynamic batcher and its decoder thread, :mod:`.translation` requests to jobs and back,
:mod:`.text` line handling, :mod:`.errors` JSON errors and body parsing,
:mod:`.schemas` the request and response bodies, :mod:`.metrics` Prometheus,
:mod:`.loading` model loading and warm-up, :mod:`.server` uvicorn with a graceful drain,
``static/`` the page. docs/serving.md is the user's guide.
"""
from jformer.serve.limits import ServeLimits

__all__ = ["ServeLimits", "create_app"]


def __getattr__(name: str):
    # Lazy: `jformer serve --help` and ServeLimits need neither fastapi nor jax.
    if name == "create_app":
        from jformer.serve.app import create_app

        return create_app
    raise AttributeError(f"module 'jformer.serve' has no attribute {name!r}")
