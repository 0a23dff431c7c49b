"""Courses and the people in them: courses, enrolments, roles and rosters (`courses`); accounts,
passwords, tokens and login limits (`users`)."""
