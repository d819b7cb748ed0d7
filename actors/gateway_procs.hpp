// REST follow of a background command (push streams, issue 24 part 2):
// GET /v1/sandboxes/{id}/processes/{pid}?follow=1 answers NDJSON in the event
// format of `POST .../exec?stream=1`: first what the command printed before
// (as much as the sandbox keeps), then its output as it comes, then its exit
// event. The output is pushed to a relay by the sandbox actor (the follow
// row of interfaces.hpp), never polled; a client that goes away unsubscribes
// (the relay dies; the command goes on).
#pragma once

#include "actors/gateway.hpp"
#include "api/gateway_routes.hpp"

namespace dsec {

void handle_follow_process(gateway_actor_ptr self, const http_call& c, const route& r);

} // namespace dsec
