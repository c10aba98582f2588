"""`rl`: one RL run, LoRA RL (rl/lora_loop.py) or head RL (rl/head_loop.py), chosen here from the
request, above both: neither loop imports the other, and both keep the run folder alike
(rl/run_files.py).

Other modules import an RL run's names from here (the request, a resume's request, the LoRA
loop's GRPO step and figures): they stay importable from here, wherever they live.
"""

from __future__ import annotations

from common.errors import UserError
from common.run_lock import run_lock
from llm import distributed
from llm.naming_head import head_beside
from rl.head_loop import run_head_rl
from rl.lora_loop import run_grpo_step, run_lora_rl, summarise, whole_step
from rl.run_files import CONFIG_FILE, RUN_FILE, RunRequest, resume_request

__all__ = ["CONFIG_FILE", "RUN_FILE", "RunRequest", "resume_request", "run_grpo_step", "run_rl", "summarise",
           "trains_head", "whole_step"]


def run_rl(request: RunRequest) -> dict | None:
    """The run's summary; None on the processes other than rank 0 under mlx.launch. Rank 0
    holds the run folder's lock (common/run_lock.py) from the first check to the last write."""
    if trains_head(request):
        with run_lock(request.out):
            return run_head_rl(request, request.show_progress)
    if not distributed.world().is_main:
        return run_lora_rl(request)
    with run_lock(request.out):
        return run_lora_rl(request)


def trains_head(request: RunRequest) -> bool:
    """Whether the run trains the start adapter's naming head (rl/head_loop.py) instead of a LoRA:
    `head.train` auto does when the start has one, on requires one."""
    setting = request.config.head.train
    has_head = head_beside(request.adapter) is not None
    if setting == "on" and request.adapter is None:
        raise UserError("head.train is on (--head on) but no start adapter is given: head RL trains the naming head "
                        "beside one; give --adapter DIR after running naming-head --adapter DIR")
    if setting == "on" and not has_head:
        raise UserError(f"head.train is on but the start adapter {request.adapter} has no naming head: "
                        "run naming-head on it first")
    return setting != "off" and has_head
