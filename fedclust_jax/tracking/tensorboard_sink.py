"""TensorBoard: one folder of event files per logged run, written with the ``tensorboard``
package alone (its event-file writer and protocol buffers; no TensorFlow, no PyTorch).

A run's folder is ``<logdir>/[<group>/]<name>-<id>``; its parameters go in as the HPARAMS
plugin's session-start record (the plugin infers the experiment from the runs' sessions:
every parameter a column, every scalar tag a metric), its metrics as scalars at step =
rounds done, its summary as scalars at the last step and a session-end record. A resumed
run writes a new event file in the same folder.
"""

from __future__ import annotations

import os
import re
import time


def _folder_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=+-]+", "_", text).strip("_") or "run"


class TensorBoardRun:
    """One logged run (``tracking.Sink`` handle)."""

    def __init__(self, logdir: str, run):
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
        from fedclust_jax.tracking import new_id
        resume = run.resume or {}
        self.folder = resume.get("folder") or os.path.join(
            *([_folder_name(run.group)] if run.group else []),
            f"{_folder_name(run.name)}-{new_id()}")
        self.path = os.path.join(logdir, self.folder)
        self.writer = EventFileWriter(self.path)
        self.last = int(resume.get("step", 0))
        if not resume:
            self._plugin_record("session_start_info", run.params)

    def state(self) -> dict:
        return {"folder": self.folder, "step": self.last}

    def _event(self, step: int, summary):
        from tensorboard.compat.proto import event_pb2
        self.writer.add_event(event_pb2.Event(wall_time=time.time(), step=int(step),
                                              summary=summary))

    def _plugin_record(self, which: str, params: dict | None = None, status=None):
        from tensorboard.compat.proto import summary_pb2
        from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2
        data = plugin_data_pb2.HParamsPluginData()
        if which == "session_start_info":
            info = data.session_start_info
            info.start_time_secs = time.time()
            for k, v in params.items():
                if isinstance(v, bool):
                    info.hparams[k].bool_value = v
                elif isinstance(v, (int, float)):
                    info.hparams[k].number_value = float(v)
                else:
                    info.hparams[k].string_value = str(v)
            tag = metadata.SESSION_START_INFO_TAG
        else:
            data.session_end_info.status = getattr(api_pb2, status)
            data.session_end_info.end_time_secs = time.time()
            tag = metadata.SESSION_END_INFO_TAG
        value = summary_pb2.Summary.Value(tag=tag, tensor=metadata.NULL_TENSOR,
                                          metadata=metadata.create_summary_metadata(data))
        self._event(0, summary_pb2.Summary(value=[value]))

    def log(self, step: int, values: dict):
        from tensorboard.compat.proto import summary_pb2
        self._event(step, summary_pb2.Summary(value=[
            summary_pb2.Summary.Value(tag=k, simple_value=float(v)) for k, v in values.items()]))
        self.last = max(self.last, int(step))

    def summary(self, values: dict):
        if values:
            self.log(self.last, values)

    def flush(self):
        self.writer.flush()

    def close(self, status: str):
        if status == "finished":
            self._plugin_record("session_end_info", status="STATUS_SUCCESS")
        elif status == "failed":
            self._plugin_record("session_end_info", status="STATUS_FAILURE")
        self.writer.close()
