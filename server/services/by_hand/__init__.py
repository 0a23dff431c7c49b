"""Grading by a person: the rubric (`rubric`), a grader's queue, holds, items and comments
(`manual`), and regrade requests (`regrade_requests`). The top room: it reads submissions and grades."""
