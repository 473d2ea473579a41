"""The report: its items and their tables, its figures and summary box, report.md / report.html and items.html."""

__all__ = ["cell_tables", "fit_tables", "items_view", "judge_controls", "length_control_section", "machine_keys",
           "per_source_section", "plots", "render", "report_items", "result", "summary_box", "unit_tables"]
