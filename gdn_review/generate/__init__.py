"""Records -> pytest modules (``gdn-review generate``): the stage's public names.

``model.py`` says what one record's module holds (the module model, which the export
stage renders too); ``generate.py`` renders, parses and writes the modules (or only
compares them), and holds the one renderer of both trees of module templates
(``Rendering``); ``literals.py`` writes plain data as Python source, in generated
modules' style and in the ruff style of exported modules.
"""

from gdn_review.generate.generate import (
    BANNER_MARK,
    DEFAULT_TEMPLATES,
    DEVICES,
    GenerateError,
    Plan,
    Rendering,
    apply,
    environment,
    expected_tests,
    module_context,
    plan,
    render_module,
)
from gdn_review.generate.model import ModuleModel, module_model, module_name, pair_id

__all__ = [
    "BANNER_MARK",
    "DEFAULT_TEMPLATES",
    "DEVICES",
    "GenerateError",
    "ModuleModel",
    "Plan",
    "Rendering",
    "apply",
    "environment",
    "expected_tests",
    "module_context",
    "module_model",
    "module_name",
    "pair_id",
    "plan",
    "render_module",
]
