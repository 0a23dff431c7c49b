"""The platform's stored records, read and written without rules of other services: the error
types every service raises (`errors`), content-addressed files (`artifacts`), the job table the
queue mirrors (`jobs`), the one client for requests made on someone's behalf (`outbound`), and
the two readers every page, export and LMS post share: the final grades that stand
(`final_grades`) and released hand-graded points (`manual_points`). The lowest room: it imports
no other service."""
