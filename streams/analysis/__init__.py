"""One analyzer per question: is this step slow? which rank do the others wait for?"""
