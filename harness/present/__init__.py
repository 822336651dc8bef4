"""Presentation: terminal tables and the HTML/Markdown report."""
