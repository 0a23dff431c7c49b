"""Assignment packages: reading and importing one as a new version (`assignments`), the courses
the platform ships (`shipped`), and the kit a student downloads (`student_kit`)."""
