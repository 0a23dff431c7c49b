"""LTI 1.3 (Advantage) with pylti1p3: an LMS launches students into a course, and their grades
go back to its gradebook (Assignment and Grade Services).

One module per part: the LMS platforms registered for a course (`platforms`); validating their
messages, where pylti1p3 gets from us what a framework adapter gives it elsewhere (`messages`);
what a launch does, from the OIDC login to the enrolled account and the deep-linked
assignments (`launch`); the grades owed to LMS gradebooks, posted by the reaper (`passback`).
"""
