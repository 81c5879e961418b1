"""A progress bar over the tasks of the Spark jobs started inside a ``with`` block."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from idemcore.progress import bar as progress_bar


def _task_counts(tracker: Any, group: str) -> tuple[int, int]:
    done = total = 0
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        for stage_id in job.stageIds if job else ():
            stage = tracker.getStageInfo(stage_id)
            if stage:
                done += stage.numCompletedTasks
                total += stage.numTasks
    return done, total


def _settled_counts(tracker: Any, group: str, wait: float = 2.0, interval: float = 0.05) -> tuple[int, int]:
    """The counts once the jobs have ended: Spark's status tracker learns of finished tasks from its listener
    bus after the job has returned, so it may lag behind by a moment (waited for, at most ``wait`` seconds)."""
    done, total = _task_counts(tracker, group)
    for _ in range(int(wait / interval)):
        if done >= total:
            break
        time.sleep(interval)
        done, total = _task_counts(tracker, group)
    return done, total


@contextmanager
def spark_progress(spark: Any, description: str, enabled: bool = True, interval: float = 0.25) -> Iterator[None]:
    """Show completed/total tasks of the jobs run in this block (polled from Spark's status tracker)."""
    context = spark.sparkContext
    group = f"idemcore-{uuid.uuid4().hex[:12]}"
    context.setJobGroup(group, description)
    stop = threading.Event()
    bar = progress_bar(0, description, "task", enabled=enabled)

    def poll() -> None:
        tracker = context.statusTracker()
        while not stop.wait(interval):
            done, total = _task_counts(tracker, group)
            bar.total = max(total, bar.total or 0)
            bar.n = done
            bar.refresh()

    thread = threading.Thread(target=poll, name="idemcore-progress", daemon=True)
    if enabled:
        thread.start()
    try:
        yield
        if enabled:
            bar.total, bar.n = _settled_counts(context.statusTracker(), group)
            bar.refresh()
    finally:
        stop.set()
        if enabled:
            thread.join()
        bar.close()
        context.setLocalProperty("spark.jobGroup.id", None)
