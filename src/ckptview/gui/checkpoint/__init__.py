"""A checkpoint's tab: its opening, pages, tree, filter, summary, detail and side panels."""
