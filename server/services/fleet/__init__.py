"""The runners and what they are given: the fleet as announced (`state`), which queue a job goes
to (`routing`), whether an assignment can be graded now (`readiness`), gradings timed again
(`retiming`), a job claimed (`claims`) and its outcome (`outcomes`), runners' own credentials
(`runner_credentials`) and the fleet's scaling plan (`autoscaling`)."""
