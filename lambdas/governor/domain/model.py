"""The runtime's pydantic base model: every model of the governor derives from :class:`Model`.

``defer_build=True``: pydantic builds a model's validator the first time the model validates, not when its class is
defined. A function's import then pays only for the classes, and each invocation builds only the validators of the
models it uses (issue 24, bench/README.md section 2). Subclasses keep the setting when they set their own
``model_config`` (pydantic merges it with the base's); ``tests/unit/test_cold_start.py`` checks every model.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Model(BaseModel):
    model_config = ConfigDict(defer_build=True)
