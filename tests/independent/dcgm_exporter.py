"""A DCGM exporter written for the tests, apart from DayOne's simulator.

It does what dcgm-exporter does with its collect-interval: the values it serves are the ones it
took at its last refresh (every `refresh_s`, counted from its start), whenever it is read. Each GPU
draws a constant `power_w`, so its energy counter (mJ since `base_mj`) at refresh k is exact and a
test knows the truth. `timestamps`: write each sample's refresh time (ms), as a Prometheus
/federate answer does (dcgm-exporter itself writes none). `hole_at_read`: the read of that number
(1-based) fails with a 500 (`hole="fail"`) or answers an empty body (`hole="empty"`).
"""

from __future__ import annotations

import math
import time

from aiohttp import web
from plain_server import PlainServer

ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"


class DcgmExporter(PlainServer):
    def __init__(self, uuids: list[str], refresh_s: float, power_w: float = 300.0, base_mj: float = 5e9,
                 timestamps: bool = False, hole_at_read: int | None = None, hole: str = "fail") -> None:
        super().__init__()
        self.uuids, self.refresh_s, self.power_w, self.base_mj = uuids, refresh_s, power_w, base_mj
        self.timestamps, self.hole_at_read, self.hole = timestamps, hole_at_read, hole
        self.born = time.time()
        self.reads = 0
        self.served_ts: list[float] = []  # when each read was answered

    def energy_j(self, t0: float, t1: float) -> float:
        """The energy all its GPUs truly drew from t0 to t1 (Unix seconds)."""
        return len(self.uuids) * self.power_w * (t1 - t0)

    async def _dcgm(self, request: web.Request) -> web.Response:
        self.reads += 1
        self.served_ts.append(time.time())
        if self.reads == self.hole_at_read:
            if self.hole == "fail":
                raise web.HTTPInternalServerError()
            return web.Response(text="", content_type="text/plain")
        tick = self.born + math.floor((time.time() - self.born) / self.refresh_s) * self.refresh_s
        energy = self.base_mj + self.power_w * (tick - self.born) * 1000.0
        stamp = f" {int(round(tick * 1000))}" if self.timestamps else ""
        lines = []
        for name, kind, value in (("DCGM_FI_DEV_GPU_UTIL", "gauge", 100.0), ("DCGM_FI_DEV_FB_USED", "gauge", 4000.0),
                                  ("DCGM_FI_DEV_POWER_USAGE", "gauge", self.power_w), (ENERGY, "counter", energy)):
            lines += [f"# HELP {name} test exporter", f"# TYPE {name} {kind}"]
            lines += [f'{name}{{gpu="{i}",UUID="{u}",modelName="Test GPU"}} {value}{stamp}'
                      for i, u in enumerate(self.uuids)]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    def longest_read_gap_s(self) -> float:
        """The longest time between two consecutive reads: a refresh is seen up to this late."""
        return max((b - a for a, b in zip(self.served_ts, self.served_ts[1:])), default=0.0)

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/metrics", self._dcgm)]
