"""Records -> pytest modules (``gdn-review generate``): the stage's public names.

``model.py`` says what one record's module holds (the module model, which the export
stage renders too); ``generate.py`` renders, parses and writes the modules (or only
compares them); ``literals.py`` writes plain data as Python source, in generated
modules' style and in the ruff style of exported modules.
"""

from gdn_review.generate.generate import (
    BANNER_MARK,
    DEFAULT_TEMPLATES,
    DEVICES,
    GenerateError,
    Plan,
    apply,
    environment,
    expected_tests,
    module_context,
    plan,
    py_literal,
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
    "apply",
    "environment",
    "expected_tests",
    "module_context",
    "module_model",
    "module_name",
    "pair_id",
    "plan",
    "py_literal",
    "render_module",
]
