"""Reports of a stored run: terminal (rich), Markdown and JSON, all drawn from `analysis`."""

from specfrontier.report.json_export import report_json
from specfrontier.report.markdown import report_markdown
from specfrontier.report.terminal import print_report

__all__ = ["print_report", "report_json", "report_markdown"]
