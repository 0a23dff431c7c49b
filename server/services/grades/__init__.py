"""A report becomes a grade, and what follows from it: the grade itself (`grading`), what every
change sets off (`grade_changes`: the board, then each LMS gradebook), the leaderboard, one
submission's points as pages show them (`score_parts`), lateness and extensions, an instructor's
review of a speedup (`reviews`), when hidden tests are shown (`visibility`), the assignment's
policy (`policies`), the final run after the deadline (`finals`), the reference's pooled speedup
(`reference`), exports, and how the class is doing (`statistics`, `course_statistics`)."""
