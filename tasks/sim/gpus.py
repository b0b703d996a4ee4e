"""The simulated GPUs: what the simulator's DCGM-style exporter (/dcgm/metrics) reports, following
its load. Energy is exact: the engine reports every change of its running count, and the counter
integrates power between changes (tests hold joules per token against it). Like dcgm-exporter, the
exporter serves the values it took at its last refresh (every `gpus.exporter_refresh_s`, default
30 s as dcgm-exporter's collect-interval), not the values at the moment it is read: a reader that
believed otherwise would agree with the simulator and be wrong on a real exporter."""

from __future__ import annotations

import math
import time
import uuid

from tasks.config.sim_profile import Profile

mono = time.monotonic


class SimGpus:
    def __init__(self, profile: Profile):
        self.profile = profile
        self.spec = profile.gpus
        self.uuids = [f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'dayone-sim/{profile.seed}/{i}')}"
                      for i in range(self.spec.count)]
        self.running = 0
        self.busy_slot_s = 0.0  # running requests integrated over time (slot-seconds)
        self.energy_mj = self.spec.energy_base_mj  # per GPU, up to self.since
        self.since = mono()
        self.born = self.since  # refreshes fall at born + k x exporter_refresh_s
        # What the exporter shows: utilization, power and energy as of its last refresh.
        self.shown = (self.utilization(), self.power_w(), self.energy_mj)
        self.shown_tick = self.born
        self.shown_memory: tuple[float, float] | None = None  # (tick, MiB): memory as first read after a refresh

    def utilization(self, running: int | None = None) -> float:
        return min(1.0, (self.running if running is None else running) / self.profile.slots)

    def power_w(self) -> float:
        """Per GPU."""
        return self.spec.idle_power_w + (self.spec.busy_power_w - self.spec.idle_power_w) * self.utilization()

    def _advance(self, now: float) -> None:
        refresh = self.spec.exporter_refresh_s
        tick = self.born + math.floor((now - self.born) / refresh) * refresh
        if tick > self.since:  # a refresh fell since the last change: the values at that instant
            self.shown = (self.utilization(), self.power_w(), self.energy_mj + self.power_w() * (tick - self.since) * 1000.0)
            self.shown_tick = tick
        dt = now - self.since
        self.energy_mj += self.power_w() * dt * 1000.0
        self.busy_slot_s += self.running * dt
        self.since = now

    def set_running(self, running: int) -> None:
        """Called on every change of the engine's running count."""
        self._advance(mono())
        self.running = running

    def reset_energy(self) -> None:
        self._advance(mono())
        self.energy_mj = 0.0

    def state(self) -> dict[str, float]:
        self._advance(mono())
        return {"busy_slot_s": self.busy_slot_s, "energy_mj": self.energy_mj, "power_w": self.power_w(),
                "utilization": self.utilization()}

    def exporter_readings(self, kv_usage: float) -> tuple[float, float, float, float]:
        """(utilization 0..1, framebuffer used MiB, power W, energy mJ) per GPU as the exporter serves
        them now: the values of its last refresh (memory as first read after that refresh)."""
        self._advance(mono())
        if self.shown_memory is None or self.shown_memory[0] != self.shown_tick:
            self.shown_memory = (self.shown_tick, self.spec.weights_mib + self.spec.kv_cache_mib * kv_usage)
        utilization, power, energy = self.shown
        return utilization, self.shown_memory[1], power, energy
