library(testthat)
library(bulkem)

# The check reporter's summary, and where each test starts and each
# expectation is: should the process die (a crash), the last lines of
# testthat.Rout.fail say in which test.
test_check("bulkem", reporter = MultiReporter$new(list(CheckReporter$new(), LocationReporter$new())))
