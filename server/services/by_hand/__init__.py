"""Grading by a person: the rubric (`rubric`), a grader's queue, holds, items and comments
(`manual`), and regrade requests (`regrades`). The top room: it reads submissions and grades."""
