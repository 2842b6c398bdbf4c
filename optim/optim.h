// Everything in hg::optim: the optimizers (SGD, Adam, AdamW, RMSprop, Adagrad, Adadelta) and the
// learning-rate schedulers.
#pragma once
#include "optim/adadelta.h"
#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/optimizer.h"
#include "optim/rmsprop.h"
#include "optim/scheduler.h"
#include "optim/sgd.h"
