"""Deterministic fault simulation: producers, a faulty network, a crashing broker, and the exactly-once checker."""

from idemcore.sim.checker import CheckReport, SentRecord, check, decode_value, encode_value
from idemcore.sim.network import Faults, NetworkStats, SimulatedNetwork
from idemcore.sim.run import SimulationReport, simulate

__all__ = ["CheckReport", "Faults", "NetworkStats", "SentRecord", "SimulatedNetwork", "SimulationReport", "check",
           "decode_value", "encode_value", "simulate"]
