"""Recommendations for the traffic a deployment really sees: a load profile (a concurrency histogram, a
time series of running requests, Prometheus `query_range` JSON, or request rates) weighted over a run's
measured cells and the performance model's predictions between them (docs/traffic.md)."""

from specfrontier.traffic.figures import DayFigures, LevelFigure
from specfrontier.traffic.profile import RUNNING_GAUGES, Profile, read_profile
from specfrontier.traffic.recommend import Peak, TrafficAnswer, parse_peak, recommend_for
from specfrontier.traffic.stored import traffic_answer

__all__ = [
    "RUNNING_GAUGES",
    "DayFigures",
    "LevelFigure",
    "Peak",
    "Profile",
    "TrafficAnswer",
    "parse_peak",
    "read_profile",
    "recommend_for",
    "traffic_answer",
]
