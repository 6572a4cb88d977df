package middleware

// RoutePattern lets the tests see the route pattern Event.Route reports.
var RoutePattern = routePattern
