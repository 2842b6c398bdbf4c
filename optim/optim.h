// Everything in hg::optim: the optimizers and the learning-rate schedulers.
#pragma once
#include "optim/adam.h"
#include "optim/optimizer.h"
#include "optim/scheduler.h"
#include "optim/sgd.h"
