"""Performance model of speculative serving (theory.md sections 1, 2, 6), fitted to measured cells.

Public API (stable; guided search builds on it):

    cells = cells_from_run(load_run(store, run_id))       # or ModelCell(...) built by hand
    model = fit_model(cells)                               # FittedModel
    p = model.predict(SettingParams(steps=5, family="EAGLE3"), concurrency=16)
    p.per_request_tok_s, p.aggregate_tok_s, p.aggregate_interval, p.batch, p.tau

The formulas (capacity law, cycle time, acceptance length) are the performance theory's, shared with
the simulator (`specfrontier.theory`); this package fits them. Everything here is a MODEL fitted to
measurements: predictions are not measurements, and every report built on them says so and shows the
model's error on the cells it was fitted to and held out.
"""

from specfrontier.perfmodel.acceptance import FamilyAcceptance
from specfrontier.perfmodel.capacity import CapacityLaw, fit_capacity
from specfrontier.perfmodel.cells import cells_from_run, setting_params
from specfrontier.perfmodel.cycle import FORMS, CycleModel
from specfrontier.perfmodel.fit import FittedModel, fit_model
from specfrontier.perfmodel.types import ModelCell, Prediction, SettingParams

__all__ = [
    "FORMS",
    "CapacityLaw",
    "CycleModel",
    "FamilyAcceptance",
    "FittedModel",
    "ModelCell",
    "Prediction",
    "SettingParams",
    "cells_from_run",
    "fit_capacity",
    "fit_model",
    "setting_params",
]
