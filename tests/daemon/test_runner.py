"""run_broker: a broker in this process from start-up to a signal's clean shutdown."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
from pathlib import Path

from klog.daemon.config import BrokerConfig
from klog.daemon.runner import run_broker


def test_start_up_objects_are_frozen_and_sigterm_shuts_down_cleanly(tmp_path: Path) -> None:
    config = BrokerConfig.from_dict(
        {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path)})

    async def go() -> None:
        task = asyncio.create_task(run_broker(config))
        # run_broker freezes what start-up made once the broker serves: full collections
        # then skip it (they were 30-40 ms pauses in the produce latency benchmark).
        while gc.get_freeze_count() == 0:
            assert not task.done(), task
            await asyncio.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(task, 30)

    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    try:
        asyncio.run(asyncio.wait_for(go(), 60))
    finally:
        gc.unfreeze()  # this test process is not a broker
    assert (tmp_path / ".kafka_cleanshutdown").exists()
