"""A real inspect_ai eval against the simulator (used by tests/analysis/test_import_inspect.py in a subprocess).

python testkit/inspect_sim_eval.py BASE_URL LOG_DIR TEMPERATURE LOG_FORMAT N_TASKS EPOCHS
The model is inspect's OpenAI-compatible provider (`openai-api/sim/…`, base URL from SIM_BASE_URL); the
samples are the first N built-in math tasks with our solve system prompt; scorer: inspect's match().
"""

from __future__ import annotations

import os
import sys


def main(url: str, log_dir: str, temperature: str, fmt: str, n: str, epochs: str) -> None:
    from inspect_ai import Task
    from inspect_ai import eval as inspect_eval
    from inspect_ai.dataset import MemoryDataset, Sample
    from inspect_ai.scorer import match
    from inspect_ai.solver import generate, system_message

    from elo_per_token.contracts.prompts import SOLVE_SYSTEM
    from elo_per_token.suites.load import load_builtin_suite

    tasks = load_builtin_suite("math")[: int(n)]
    ds = MemoryDataset(
        [Sample(input=t["prompt"], target=str(t["reference"]), id=t["task_id"]) for t in tasks],
        name="ept-math",
    )
    os.environ["SIM_BASE_URL"] = url
    os.environ.setdefault("SIM_API_KEY", "sk-sim-unused")
    task = Task(
        dataset=ds,
        solver=[system_message(SOLVE_SYSTEM), generate()],
        scorer=match(numeric=True),
        name="ept_math",
    )
    logs = inspect_eval(
        task,
        model="openai-api/sim/ept-sim-1",
        epochs=int(epochs),
        log_dir=log_dir,
        display="none",
        temperature=float(temperature),
        log_format=fmt,
    )
    assert logs[0].status == "success", logs[0].error
    print(logs[0].location)


if __name__ == "__main__":
    main(*sys.argv[1:])
