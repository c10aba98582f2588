"""The main job knows its device: `pipeline --recipe auto` runs the GPU recipe on a GPU."""

import mlx.core as mx

from rl.config import build_config
from rl.pipeline import GPU_RECIPE, PipelineSettings, recipe_for


def test_auto_follows_the_device_and_the_gpu_recipe_is_a_valid_run():
    assert recipe_for("auto", mx.Device(mx.cpu)) == {} == recipe_for("cpu")
    assert recipe_for("auto", mx.Device(mx.gpu)) == GPU_RECIPE == recipe_for("gpu")
    settings = PipelineSettings(**GPU_RECIPE)
    settings.check()
    assert settings.rl_start == "endgame" and settings.group_size == 16 and settings.sft_batch == 16
    # The RL stage's config the recipe implies loads (every key in range).
    config = build_config({}, {"rollout.start": settings.rl_start, "rollout.turns": settings.rl_turns,
                               "eval_endgame": settings.rl_eval_endgame, "best_by": "endgame",
                               "eval_every": settings.rl_eval_every, "rollout.group_size": settings.group_size})
    assert config.best_by == "endgame"
