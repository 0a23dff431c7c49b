"""What users are told, in the page and by e-mail: notifications and their kinds, each user's
choices, the grade changes worth telling, the e-mail outbox and its sender, announcements."""
