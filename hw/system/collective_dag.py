"""The message DAG of a collective while it is built: :class:`MessageDag`.

The schedules of :mod:`hw.system.collective_schedules` add messages in vectorized blocks
(sender, receiver, bytes, start delay, reduction tail), data dependencies (a message waits for
the arrival of another) and port order (a message waits for its sender's previous send); the
DAG then packs them into the engine's :class:`~hw.system.engine.Messages`.
"""

from __future__ import annotations

import numpy as np

from hw.system.engine import Messages, messages_from_edges

__all__ = ["MessageDag", "finals_by_dst"]


class MessageDag:
    """Accumulates messages (vectorized blocks) and their edges. ``o`` is the overhead a
    message pays after its inputs are ready (seconds), ``gamma`` the reduction time per byte;
    ``group`` is the index of the concurrent group whose messages are being added."""

    def __init__(self, o: float, gamma: float):
        self.o = o
        self.gamma = gamma
        self.cols = {k: [] for k in ("src", "dst", "nbytes", "delay", "tail")}
        self.group_start: list = []
        self.edges = ([], [])
        self.chain = ([], [])
        self.n = 0
        self.group = 0

    def add(self, src, dst, nbytes, delay, tail=0.0) -> np.ndarray:
        """Messages ``src[i] -> dst[i]`` (``nbytes``, ``delay``, ``tail``: arrays or one value
        for all); returns their ids."""
        src = np.asarray(src, dtype=np.int32)
        k = len(src)
        if self.group >= len(self.group_start):
            self.group_start.append(self.n)
        ids = np.arange(self.n, self.n + k, dtype=np.int64)
        for name, v, dt in (("src", src, np.int32), ("dst", dst, np.int32),
                            ("nbytes", nbytes, np.float64), ("delay", delay, np.float64),
                            ("tail", tail, np.float64)):
            a = np.asarray(v, dtype=dt)
            self.cols[name].append((float(a), k) if a.ndim == 0 else a)
        self.n += k
        return ids

    def dep(self, pred, succ):
        """Message ``succ[i]`` waits for ``pred[i]`` to arrive."""
        self._edge(self.edges, pred, succ)

    def after_send(self, pred, succ):
        """Message ``succ[i]`` waits until the last byte of ``pred[i]`` has left (port order)."""
        self._edge(self.chain, pred, succ)

    @staticmethod
    def _edge(store, pred, succ):
        pred, succ = np.asarray(pred), np.asarray(succ)
        if pred.shape != succ.shape:
            pred, succ = np.broadcast_arrays(pred, succ)
        store[0].append(pred.ravel().astype(np.int32, copy=False))
        store[1].append(succ.ravel().astype(np.int32, copy=False))

    def gate(self, gates, ranks_of_roots, root_ids):
        """Roots ``root_ids`` (sent by ``ranks_of_roots``) wait for the arrival of
        ``gates[rank]`` (message ids into that rank from the previous phase)."""
        if gates is None:
            return
        for rid, rank in zip(root_ids.tolist(), ranks_of_roots.tolist()):
            g = gates.get(rank)
            if g is not None and len(g):
                self.dep(g, np.full(len(g), rid))

    def barrier(self, rank, preds, delay) -> int:
        """A zero-byte message rank -> rank that waits for ``preds`` (a join node)."""
        bid = int(self.add([rank], [rank], 0.0, delay)[0])
        if len(preds):
            self.dep(preds, np.full(len(preds), bid))
        return bid

    def _column(self, name, dtype):
        parts = self.cols.pop(name)
        if all(isinstance(x, tuple) for x in parts) and len({x[0] for x in parts}) <= 1:
            return parts[0][0] if parts else 0.0          # one value for every message
        out = np.empty(self.n, dtype=dtype)
        i = 0
        for x in parts:
            k = x[1] if isinstance(x, tuple) else len(x)
            out[i:i + k] = x[0] if isinstance(x, tuple) else x
            i += k
        return out

    def messages(self) -> tuple[Messages, np.ndarray | float, np.ndarray]:
        """(Messages, tail per message or one value, index of each group's first message)."""
        cols = {k: self._column(k, dt) for k, dt in (
            ("src", np.int32), ("dst", np.int32), ("nbytes", np.float64),
            ("delay", np.float64), ("tail", np.float64))}
        e = (np.concatenate(self.edges[0]), np.concatenate(self.edges[1])) if self.edges[0] \
            else None
        self.edges = ([], [])
        c = (np.concatenate(self.chain[0]), np.concatenate(self.chain[1])) if self.chain[0] \
            else None
        self.chain = ([], [])
        msgs = messages_from_edges(cols["src"], cols["dst"], cols["nbytes"], cols["delay"],
                                   self.o, e, c)
        return msgs, cols["tail"], np.asarray(self.group_start, np.int64)


def finals_by_dst(dst_ranks, ids) -> dict:
    """``{receiving rank: ids of its messages}``: what each rank's next phase waits for."""
    out: dict = {}
    for r, i in zip(np.asarray(dst_ranks).tolist(), np.asarray(ids).tolist()):
        out.setdefault(r, []).append(i)
    return {r: np.asarray(v, np.int64) for r, v in out.items()}
