"""The run report: one static HTML page (DAG, timeline, costs, bugs, hints) of a project."""

from devloop.report.data import ReportData, UnitReport, gather
from devloop.report.render import build_report, render, write_report

__all__ = ["ReportData", "UnitReport", "build_report", "gather", "render", "write_report"]
