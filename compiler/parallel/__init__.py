"""Training over many chips: backward ops, transformer specs, strategies and the step planner.

``compiler.parallel`` never imports ``npulab`` and never models a device or a network itself:
:func:`plan_step` takes an ``op_time`` and a ``comm_time`` callback (see :mod:`.step`). The
pipeline schedules are simulated in :mod:`.pipeline`; the closed forms (communication bytes,
ZeRO memory, bubble, activations) live in :mod:`.formulas`.
"""

from compiler.parallel.backward import (backward_ops, graph_params, has_weights,
                                        is_activation_product, param_count)
from compiler.parallel.formulas import (activation_bytes_per_layer, bubble_fraction,
                                        collective_sent_bytes, dp_allreduce_bytes,
                                        tp_allreduce_bytes, zero_comm_bytes, zero_memory_bytes)
from compiler.parallel.llm import (MODEL_PRESETS, TransformerModel, get_model, model_flops,
                                   model_names)
from compiler.parallel.pipeline import PipelineResult, schedule_order, simulate_pipeline
from compiler.parallel.step import CommTime, OpTime, StepReport, plan_step
from compiler.parallel.strategy import RECOMPUTE, SCHEDULES, Strategy, parse_strategy

__all__ = [
    "backward_ops", "graph_params", "has_weights", "is_activation_product", "param_count",
    "MODEL_PRESETS", "TransformerModel", "get_model", "model_flops", "model_names",
    "CommTime", "OpTime", "PipelineResult", "StepReport", "activation_bytes_per_layer",
    "bubble_fraction", "collective_sent_bytes", "dp_allreduce_bytes", "plan_step",
    "schedule_order", "simulate_pipeline", "tp_allreduce_bytes", "zero_comm_bytes",
    "zero_memory_bytes", "RECOMPUTE", "SCHEDULES", "Strategy", "parse_strategy",
]
