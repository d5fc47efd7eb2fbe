"""A ``call`` case: a declaration of the builder's module called (or read) on its own.

The target is a public function of the builder's module
(``plan_flashinfer_checkpoints``), or a classmethod, staticmethod or class attribute
of the builder class or of the backend class whose ``get_builder_cls`` returns it
(``GDNAttentionBackend.supports_device_cpu_query_lens_mismatch``), found in the
loaded release (a mutant's module where one is loaded), never from a list. It is
called as the engine calls it: a parameter named ``vllm_config``, ``kv_cache_spec``
or ``device`` gets the case's own ``VllmConfig`` (the one the case's builder gets,
as a GPU server resolves it), ``MambaSpec`` and device; the case's ``arguments`` the
rest. A release that inherits the target reads the inherited value; one without it
skips as "not applicable: vLLM X has no <target>". kb.call_targets validates the
same targets against the releases' files.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import sys

import torch

from gdn_review.common.vocabulary import SkipKind
from gdn_review.harness.builders import (
    as_on_server,
    builder_class,
    make_vllm_config,
    mamba_spec,
)
from gdn_review.harness.environment import prepare_platform
from gdn_review.harness.origin import setting_up, skip
from gdn_review.harness.server import measured_value, raised_words

# Classes a call may pass as its builder_cls argument (kb.server_config.HostClass) ->
# their module (None: the builder's own).
HOST_CLASSES = {
    "GDNAttentionMetadataBuilder": None,
    "KimiK3ROCmKDAMetadataBuilder": "vllm.models.kimi_k3.amd.kda_metadata",
}
# The parameters the harness fills from the case (kb.call_targets.CASE_ARGUMENTS).
CASE_ARGUMENTS = ("vllm_config", "kv_cache_spec", "device")


def backend_classes(builder_cls) -> list:
    """The classes of the builder's module whose get_builder_cls returns it."""
    module = sys.modules[builder_cls.__module__]
    return [
        value
        for value in vars(module).values()
        if isinstance(value, type)
        and value.__module__ == module.__name__
        and "get_builder_cls" in vars(value)
        and value.get_builder_cls() is builder_cls
    ]


def declaration(target: str, builder: str | None):
    """The loaded release's ``target`` (``name`` of the builder's module, or
    ``Class.name`` of the builder or its backend class), inherited or its own."""
    import vllm

    with setting_up("importing vLLM's builder module"):
        cls = builder_class(builder)
        module = importlib.import_module(cls.__module__)
    owner_name, _, name = target.rpartition(".")
    if not owner_name:
        owner = module
    elif owner_name == cls.__name__:
        owner = cls
    else:
        owner = next(
            (b for b in backend_classes(cls) if b.__name__ == owner_name), None
        )
    if owner is None or not hasattr(owner, name):
        release = vllm.__version__
        skip(SkipKind.ABSENT, f"not applicable: vLLM {release} has no {target}")
    return module, getattr(owner, name)


def _case_arguments(function, settings) -> dict:
    """The case's own VllmConfig, MambaSpec and device for the parameters that ask."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):  # a builtin without a signature: nothing to fill
        return {}
    made = {}
    if "vllm_config" in parameters:
        with setting_up("VllmConfig"):
            made["vllm_config"] = make_vllm_config(settings)
    if "kv_cache_spec" in parameters:
        made["kv_cache_spec"] = mamba_spec(settings)
    if "device" in parameters:
        made["device"] = torch.device(settings.device)
    return made


def call_declaration(case: dict, settings) -> dict:
    """A ``call`` case's measurement: what its target returned (or, for ``attribute``,
    holds) as plain data, or what it raised; ``settings``: its BuilderSettings."""
    prepare_platform()
    call = case["call"]
    target = call.get("function") or call["attribute"]
    module, value = declaration(target, case.get("builder"))
    if "function" not in call:
        return {"returned": measured_value(value), "raised": None}
    arguments = {
        **_case_arguments(value, settings),
        **call.get("arguments", {}),
    }
    if "builder_cls" in arguments:
        # A class named by the record (kb.server_config.HostClass): the loaded module's
        # own builder, or vLLM's subclass of it.
        name = arguments["builder_cls"]
        where = HOST_CLASSES[name]
        arguments["builder_cls"] = getattr(
            module if where is None else importlib.import_module(where), name
        )
    # Only the call is the case's behaviour: where the server set-up around it raises,
    # it could not run; reading what it returned is our own code (origin.py's rule).
    with contextlib.ExitStack() as server:
        with setting_up("the server's configuration"):
            server.enter_context(as_on_server(settings))
        try:
            returned = value(**arguments)
        except Exception as error:  # noqa: BLE001  (what it raises is what the case states)
            return {"returned": None, "raised": raised_words(error)}
        return {"returned": measured_value(returned), "raised": None}
